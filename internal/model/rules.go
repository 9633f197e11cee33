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
