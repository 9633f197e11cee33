package claim

// Stored is a claim's record as the lifecycle decides on it: the columns
// of the claims row that Begin and Finish read or change, and nothing of
// what is only kept for people (statuses, errors, times). Both backends
// keep these columns; their SQL does what Start and Finish say (the
// differential test in internal/store holds them to it).
type Stored struct {
	State    State  // StateNone: no record
	Reason   Reason // the last decision's reason
	Attempts int    // calls to the partner
	Failures int    // transient failures of the current copy
	// Lineage is the first step whose copy is still to be acted on
	// (Found.Lineage). It only rises, but for a first try of a fresh
	// copy, which starts it over (Begun.Restart).
	Lineage int
	// DeadToken is the token of the copy the dead-letter decision was
	// made for (Found.DeadToken); changed only by a dead-letter decision.
	DeadToken string
	// Holder names who has the claim in flight; "" when nobody does.
	Holder string
}

// Holding is who acts on a record: the holder (one open store) that
// calls Start or Finish.
type Holding struct {
	Holder string // the store's owner name (e.g. proc.Holder)
}

// Liveness tells whether a holder named on a record is gone: its process
// no longer runs. It is the one part of a Begin that is not pure, so the
// pure rules take its answer as input (HeldElsewhere's live), and a test
// or a model passes its own.
type Liveness interface {
	Gone(holder string) bool
}

// HeldElsewhere is the one rule both backends use for Found.HeldElsewhere:
// the record is in flight for a holder other than h, and that holder is
// live. What "live" means is each backend's evidence: on SQLite, the
// holder's lease has not run out and Liveness does not say it is gone; on
// PostgreSQL, nothing, since Begin reads only with the claim's advisory
// lock held, and a holder's claim lives exactly as long as its session
// (and lock): there live is false.
func HeldElsewhere(r Stored, h Holding, live bool) bool {
	return r.State == StateInFlight && r.Holder != "" && r.Holder != h.Holder && live
}

// Found is what Begin decides on when it reads r; heldElsewhere is
// HeldElsewhere's answer.
func (r Stored) Found(heldElsewhere bool) Found {
	return Found{State: r.State, Reason: r.Reason, Failures: r.Failures, HeldElsewhere: heldElsewhere,
		Lineage: r.Lineage, DeadToken: r.DeadToken}
}

// Start is a Begin of copy c by h on record r, whole: what Begin decides,
// and the record after it. Only an Acquired claim changes the record: it
// is in flight for h, its failure count is the one Begin kept (zero for a
// fresh copy), and a first try of a fresh copy starts the lineage over.
// Its last reason, attempts and dead token stay until Finish.
func Start(r Stored, c Copy, h Holding, live bool) (Stored, Begun) {
	b := Begin(r.Found(HeldElsewhere(r, h, live)), c)
	if b.Result != Acquired {
		return r, b
	}
	r.State, r.Holder, r.Failures = StateInFlight, h.Holder, b.Failures
	if b.Restart {
		r.Lineage = 0
	}
	return r, b
}

// Finish is what record r becomes when h records attempt a, and the
// outcome the caller then acts on (a.Outcome, or OutDuplicate). It is the
// rule every backend's Finish writes in SQL:
//
//   - A done record is never overwritten: the claim was delivered, and
//     any later outcome is a duplicate's (OutDuplicate, so the caller
//     acks). Only its call is counted, and its lineage may rise.
//   - A late holder releases only what it holds: a record in flight for
//     another holder keeps its state, reason, failures and holder (that
//     holder records its own outcome), unless a is the acceptance itself,
//     which is the truth whoever heard it. The call is counted, and the
//     lineage may rise, but for a dead-letter decision: kept out of the
//     record, it is not on record, and a lineage raised past it would
//     make its copy "a step carried out" (StepDone) when its reject is
//     lost with its channel: acked, and the claim nowhere.
//   - A dead-letter decision on record is kept, unless h holds it or a
//     is the acceptance: a late holder (its lease ran out between its
//     delayed copy's confirm and its record) must not turn the next
//     step's dead record back into a failed one, or that step's lost
//     reject leaves the claim nowhere. The call is counted, and the
//     lineage may rise.
//   - Otherwise (no record, a record h holds, nobody holds, or one left
//     failed) the record takes a's outcome: its state and reason,
//     no holder, a call and a transient failure added to the counters
//     (Attempt.Counts), and the dead token of a dead-letter decision (other
//     outcomes keep the one on record, which only a dead record reads).
//   - The lineage only rises: to a.Lineage when that is higher.
//
// An attempt without an action decided changes nothing (the stores refuse
// it with an error).
func Finish(r Stored, a Attempt, h Holding) (Stored, Outcome) {
	state := a.Outcome.Action.State()
	if state == StateNone {
		return r, a.Outcome
	}
	called, failed := a.Counts()
	r.Attempts += called
	switch {
	case r.State == StateDone:
		r.Lineage = max(r.Lineage, KeptLineage(r.State, a))
		return r, OutDuplicate
	case state != StateDone && r.Holder != h.Holder && (r.State == StateDead || r.State == StateInFlight && r.Holder != ""):
		r.Lineage = max(r.Lineage, KeptLineage(r.State, a))
		return r, a.Outcome
	}
	r.Lineage = max(r.Lineage, a.Lineage)
	r.State, r.Reason, r.Holder = state, a.Outcome.Reason, ""
	r.Failures += failed
	if state == StateDead {
		r.DeadToken = a.Token
	}
	return r, a.Outcome
}

// KeptLineage is what a raises the lineage of a record in state cur to
// when Finish keeps the record (done, in flight for another holder, or a
// dead-letter decision h does not hold): a.Lineage, but 0, no change, for
// a dead-letter decision kept out of a claim in flight. That decision is
// not on record, and a lineage raised past it would make its copy "a step
// carried out" (StepDone) when its reject is lost with its channel: acked,
// and the claim nowhere. The stores' SQL raises a kept record by it.
func KeptLineage(cur State, a Attempt) int {
	if cur == StateInFlight && a.Outcome.Action == DeadLetter {
		return 0
	}
	return a.Lineage
}
