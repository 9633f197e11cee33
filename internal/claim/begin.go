package claim

// BeginResult is what a holder's Begin found.
type BeginResult int

const (
	// Acquired: this holder has the claim; call the partner, then Finish.
	Acquired BeginResult = iota
	// Done: the claim was delivered already; ack without calling.
	Done
	// Busy: another live holder has it in progress; wait and ask again.
	Busy
	// DeadBefore: this redelivered copy's claim was dead-lettered, and the
	// reject never reached the broker (the connection closed between the
	// record and the reject). Reject it again, with the recorded reason,
	// without calling the partner: the decision is on record, and calling
	// again would be a call the decision already ruled out.
	DeadBefore
)

func (b BeginResult) String() string {
	return [...]string{"acquired", "done", "busy", "dead before"}[b]
}

// Begun is what Begin found of a message_id.
type Begun struct {
	Result BeginResult
	// Failures is the number of transient failures of the current copy on
	// record (Acquired).
	Failures int
	// Prior is the dead-letter decision on record (DeadBefore).
	Prior Outcome
}

// Found is what a store read of a claim's record when a holder began work
// on it, in the terms Begin decides on.
type Found struct {
	State    State  // StateNone: no record
	Reason   Reason // the last decision's reason on record
	Failures int    // transient failures on record
	// HeldElsewhere: the record is in flight for another holder that is
	// still alive. Each backend knows it its own way: SQLite by the
	// holder's lease and whether its process still runs, PostgreSQL by
	// the claim's advisory lock, which its Begin holds before it reads
	// (so there it is always false).
	HeldElsewhere bool
}

// Begin decides what a Begin that found f does; every backend calls it,
// so that the rule is written once. fresh says the delivery is not a
// redelivery.
//
//	found                          result
//	no record                      Acquired, no failures
//	done                           Done: ack without a call
//	dead, a redelivered copy       DeadBefore: reject again without a call
//	dead, a fresh copy             Acquired: a replay is what it is for
//	in flight for a live holder    Busy: wait for its outcome
//	anything else                  Acquired (a stale holder's claim too)
//
// A fresh copy starts its failure count from zero, so that a republished
// or replayed claim gets its one retry again; a redelivered one keeps the
// count on record.
func Begin(f Found, fresh bool) Begun {
	switch {
	case f.State == StateNone:
		return Begun{Result: Acquired}
	case f.State == StateDone:
		return Begun{Result: Done}
	case f.State == StateDead && !fresh:
		return Begun{Result: DeadBefore, Prior: Outcome{DeadLetter, f.Reason}}
	case f.State == StateInFlight && f.HeldElsewhere:
		return Begun{Result: Busy}
	}
	if fresh {
		return Begun{Result: Acquired}
	}
	return Begun{Result: Acquired, Failures: f.Failures}
}
