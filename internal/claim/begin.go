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
	// StepDone: the step of this copy was carried out already (with
	// --retry-delays: its delayed copy is confirmed in a delay queue, or
	// the claim was dead-lettered after it), and this copy is one an ack
	// lost with its connection left behind. Ack it without a call: acted
	// on again, it would fork the claim into two lineages of retries.
	StepDone
)

func (b BeginResult) String() string {
	return [...]string{"acquired", "done", "busy", "dead before", "step done"}[b]
}

// Begun is what Begin found of a message_id.
type Begun struct {
	Result BeginResult
	// Failures is the number of transient failures of the current copy on
	// record (Acquired).
	Failures int
	// Prior is the dead-letter decision on record (DeadBefore).
	Prior Outcome
	// Restart: a first try of a fresh copy (a claim published again, or
	// replayed) takes the claim, and its lineage starts over (Acquired).
	Restart bool
}

// Copy is what a delivery says of itself when a holder begins work on it.
type Copy struct {
	ClaimID string // the body's claimId, kept on the record for people
	Fresh   bool   // not a redelivery
	// Step is the retries behind the copy (consumer --retry-delays: the
	// delay queues it came through; retry.Done), 0 for a first try.
	Step int
	// Token names this copy among the copies of its step (retry.Token: a
	// random word each delayed copy carries, the same on every redelivery
	// of it); "" for a first try.
	Token string
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
	// Lineage is the first step whose copy is still to be acted on: the
	// step after the last one carried out (see StepDone).
	Lineage int
	// DeadToken is the Token of the copy the record's dead-letter decision
	// was made for ("" when it had none, or the record is older than
	// tokens).
	DeadToken string
}

// Begin decides what a Begin that found f does for copy c; every backend
// calls it, so that the rule is written once.
//
//	found                          result
//	no record                      Acquired, no failures
//	done                           Done: ack without a call
//	dead, a redelivered copy       DeadBefore: reject again without a call
//	  (unless it is a sibling: see below)
//	a step carried out already     StepDone: ack without a call
//	  (c.Step below the lineage;     (a first try of a fresh copy is a
//	  not a first try of a fresh     claim published again or replayed:
//	  copy)                          it starts over instead)
//	dead, a fresh copy past        StepDone: a delayed sibling of the
//	  step 0                         dead-lettered copy (a lost confirm
//	                                 left two), not a replay: dlq strips
//	                                 x-death, so a replay comes back at
//	                                 step 0 (retry.Done)
//	dead, a fresh copy at step 0   Acquired: a replay is what it is for
//	in flight for a live holder    Busy: wait for its outcome
//	anything else                  Acquired (a stale holder's claim too)
//
// A fresh copy starts its failure count from zero, so that a republished
// or replayed claim gets its one retry again; a redelivered one keeps the
// count on record. The dead-letter decision goes before the lineage for a
// redelivered copy: its reject may have been lost with its connection,
// and only rejecting again is sure to leave the claim in claim.dead.
//
// Only the copy the decision was made for can be that copy, though. A
// crash between a delayed copy's confirm and its record leaves two copies
// of the next step (the price of never leaving none); when the first is
// dead-lettered and the second, delivered meanwhile and waiting (Busy),
// comes back redelivered after its connection closed, rejecting it again
// would put a second copy of one claim in claim.dead. The record keeps
// the dead-lettered copy's token, so that a redelivered copy of a step
// carried out whose token is another is known for the sibling it is, and
// acked (StepDone). Without a token on record (a first try was
// dead-lettered, or the record predates tokens) no copy can be told from
// the one whose reject was lost, and each is rejected again.
func Begin(f Found, c Copy) Begun {
	first := c.Fresh && c.Step == 0
	switch {
	case f.State == StateNone:
		return Begun{Result: Acquired, Restart: first}
	case f.State == StateDone:
		return Begun{Result: Done}
	case f.State == StateDead && c.Fresh && c.Step > 0:
		// Called again, it would be a second call after the decision, and
		// could dead-letter the claim a second time (the model checker's
		// finding 3, docs/model.md).
		return Begun{Result: StepDone}
	case f.State == StateDead && !c.Fresh && f.sibling(c):
		return Begun{Result: StepDone}
	case f.State == StateDead && !c.Fresh:
		return Begun{Result: DeadBefore, Prior: Outcome{DeadLetter, f.Reason}}
	case c.Step < f.Lineage && !first:
		return Begun{Result: StepDone}
	case f.State == StateInFlight && f.HeldElsewhere:
		return Begun{Result: Busy}
	}
	if c.Fresh {
		return Begun{Result: Acquired, Restart: first}
	}
	return Begun{Result: Acquired, Failures: f.Failures}
}

// sibling reports whether copy c is known not to be the one the record's
// dead-letter decision was made for: the record names that copy by its
// token, c carries another (or none), and c's step was carried out.
func (f Found) sibling(c Copy) bool {
	return f.DeadToken != "" && c.Token != f.DeadToken && c.Step < f.Lineage
}
