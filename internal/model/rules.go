package model

import (
	"time"

	"eaimq/internal/claim"
)

// Rules are the decisions the relay makes about a claim, as the checker
// calls them. Production is internal/claim's functions themselves, not a
// copy: the model explores the protocol around them, and a mutant wraps
// one of them to show that the invariants would catch it going wrong.
type Rules struct {
	// Start is a whole Begin: claim.Start.
	Start func(r claim.Stored, c claim.Copy, h claim.Holding, live bool) (claim.Stored, claim.Begun)
	// Finish records an attempt: claim.Finish.
	Finish func(r claim.Stored, a claim.Attempt, h claim.Holding) (claim.Stored, claim.Outcome)
	// Decide reads the partner's answer: claim.Decide.
	Decide func(status int, accept claim.AcceptSet, redelivered bool, prior int) claim.Outcome
	// Delayed is the --retry-delays rule: claim.Delayed.
	Delayed func(out claim.Outcome, delays []time.Duration, done int, retryAfter time.Duration) (claim.Outcome, time.Duration)
	// HeldForRecord says which answers wait for their record while the
	// store does not answer: claim.HeldForRecord.
	HeldForRecord func(a claim.Attempt) bool
	// AckBeforeRecord turns the relay's order around (act, then record).
	// It is the one mutant of the relay's steps rather than of a
	// function: "record, then ack" is an order, not a decision.
	AckBeforeRecord bool
}

// Proposed is Production with the three fixes the checker asks of claim
// (docs/model.md, "What it found"), as guards around the production
// functions rather than copies of them; each goes once claim has it.
func Proposed() Rules { return proposed(allFixes) }

// The fixes Proposed makes, one bit each.
type fix uint8

const (
	// keepDead: a late holder does not overwrite a dead-letter decision
	// it does not hold (Finish). Today's Finish turns a dead record back
	// into a failed one when a holder whose lease ran out records its
	// delayed retry after another holder dead-lettered the next step; a
	// lost reject then leaves the claim nowhere.
	keepDead fix = 1 << iota
	// lateDeadLineage: a late holder's dead-letter decision, kept out of
	// a record another holder has in flight, does not raise its lineage
	// (Finish). Today it does, though the decision is not on record: the
	// late holder's reject lost with its channel, the redelivered copy is
	// "a step carried out" (StepDone), acked, and the claim is nowhere.
	lateDeadLineage
	// siblingNotReplay: a fresh copy of a step past the first, on a dead
	// record, is a delayed sibling, not a replay (a replay comes back at
	// step 0: dlq strips x-death) (Begin). Today's Begin takes it for a
	// replay: it calls the partner again and can dead-letter the claim a
	// second time.
	siblingNotReplay
	allFixes = keepDead | lateDeadLineage | siblingNotReplay
)

func proposed(fixes fix) Rules {
	r := Production()
	r.Start = func(st claim.Stored, c claim.Copy, h claim.Holding, live bool) (claim.Stored, claim.Begun) {
		if fixes&siblingNotReplay != 0 && st.State == claim.StateDead && c.Fresh && c.Step > 0 {
			return st, claim.Begun{Result: claim.StepDone}
		}
		return claim.Start(st, c, h, live)
	}
	r.Finish = func(st claim.Stored, a claim.Attempt, h claim.Holding) (claim.Stored, claim.Outcome) {
		elsewhere := st.Holder != "" && st.Holder != h.Holder
		if fixes&lateDeadLineage != 0 && st.State == claim.StateInFlight && elsewhere && a.Outcome.Action == claim.DeadLetter {
			kept, out := claim.Finish(st, a, h)
			kept.Lineage = st.Lineage
			return kept, out
		}
		if fixes&keepDead != 0 && st.State == claim.StateDead && st.Holder != h.Holder && a.Outcome.Action.State() != claim.StateDone {
			// As Finish does for a record it keeps: the call counted,
			// the lineage risen.
			kept, _ := claim.Finish(claim.Stored{State: claim.StateFailed, Attempts: st.Attempts, Lineage: st.Lineage}, a, h)
			st.Attempts, st.Lineage = kept.Attempts, kept.Lineage
			return st, a.Outcome
		}
		return claim.Finish(st, a, h)
	}
	return r
}

// Production is the rules the relay runs with.
func Production() Rules {
	return Rules{
		Start:         claim.Start,
		Finish:        claim.Finish,
		Decide:        claim.Decide,
		Delayed:       claim.Delayed,
		HeldForRecord: claim.HeldForRecord,
	}
}
