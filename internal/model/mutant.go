package model

import (
	"time"

	"eaimq/internal/claim"
)

// Mutant is a wrong version of one decision: a wrapper around the
// production function's input or result, chosen by value (Config.Rules),
// never by editing code. The checker must kill each one: find an
// invariant it breaks, with a shortest trace.
type Mutant struct {
	Name    string
	Answers []Answer // the claims its search runs with
	Delays  int      // 0: the lab's rule; 1: --retry-delays with one delay
	// Faults is the faults a trace needs to kill it (0: the fixpoint
	// run's two).
	Faults int
	Wrap   func(r *Rules) // nil: the production rules
	// StaleGoesOn is the relay's mutant rather than a rule's: a worker
	// whose channel closed before its Begin goes on with its delivery
	// (Config.StaleStops false).
	StaleGoesOn bool
}

// Config is the search that must kill m: two consumers, every fault at
// budget 1 (crashes and lost acks 2), at most two faults in a trace (or
// m.Faults), on the rules the fixpoint run checks (Production, and
// StaleStops).
func (m Mutant) Config() Config {
	r := Production()
	if m.Wrap != nil {
		m.Wrap(&r)
	}
	faults := 2
	if m.Faults > 0 {
		faults = m.Faults
	}
	return Config{Answers: m.Answers, Consumers: 2, Delays: m.Delays, Budget: FigureBudget(), MaxFaults: faults,
		StaleStops: !m.StaleGoesOn, Rules: r}
}

// Mutants are the mutants of the production decisions the checker kills.
var Mutants = []Mutant{
	{Name: "the rule before the copy token: a redelivered copy of a dead claim is rejected again whatever its token",
		Answers: []Answer{AlwaysBusy, Accepts}, Delays: 1, Wrap: func(r *Rules) {
			start := r.Start
			r.Start = func(st claim.Stored, c claim.Copy, h claim.Holding, live bool) (claim.Stored, claim.Begun) {
				tok := st.DeadToken
				st.DeadToken = ""
				st, b := start(st, c, h, live)
				st.DeadToken = tok
				return st, b
			}
		}},
	{Name: "ack before record: the relay settles, then records",
		Answers: []Answer{Accepts, AlwaysBusy}, Wrap: func(r *Rules) { r.AckBeforeRecord = true }},
	{Name: "a 422 requeued (Decide)",
		Answers: []Answer{Refuses, Accepts}, Wrap: func(r *Rules) {
			decide := r.Decide
			r.Decide = func(status int, accept claim.AcceptSet, redelivered bool, prior int) claim.Outcome {
				if out := decide(status, accept, redelivered, prior); out != claim.OutRejected {
					return out
				}
				return claim.OutRetry
			}
		}},
	{Name: "a redelivered transient failure requeued again (Decide)",
		Answers: []Answer{AlwaysBusy, Accepts}, Wrap: func(r *Rules) {
			decide := r.Decide
			r.Decide = func(status int, accept claim.AcceptSet, redelivered bool, prior int) claim.Outcome {
				if out := decide(status, accept, redelivered, prior); out != claim.OutFailed {
					return out
				}
				return claim.OutRetry
			}
		}},
	{Name: "Finish overwrites a done record",
		Answers: []Answer{BusyOnce, Accepts}, Wrap: func(r *Rules) {
			finish := r.Finish
			r.Finish = func(st claim.Stored, a claim.Attempt, h claim.Holding) (claim.Stored, claim.Outcome) {
				if st.State == claim.StateDone && a.Outcome.Action.State() != claim.StateDone {
					st.State, st.Holder = claim.StateFailed, ""
				}
				return finish(st, a, h)
			}
		}},
	{Name: "a late holder releases another's claim (Finish)",
		Answers: []Answer{AlwaysBusy, Accepts}, Wrap: func(r *Rules) {
			finish := r.Finish
			r.Finish = func(st claim.Stored, a claim.Attempt, h claim.Holding) (claim.Stored, claim.Outcome) {
				if st.State == claim.StateInFlight {
					st.Holder = h.Holder
				}
				return finish(st, a, h)
			}
		}},
	{Name: "the lineage goes back (Finish sets it rather than raise it)",
		Answers: []Answer{AlwaysBusy, Accepts}, Delays: 1, Wrap: func(r *Rules) {
			finish := r.Finish
			r.Finish = func(st claim.Stored, a claim.Attempt, h claim.Holding) (claim.Stored, claim.Outcome) {
				after, out := finish(st, a, h)
				after.Lineage = a.Lineage
				return after, out
			}
		}},
	{Name: "a done record not read: the claim is called again (Begin)",
		Answers: []Answer{Accepts, AlwaysBusy}, Wrap: func(r *Rules) {
			start := r.Start
			r.Start = func(st claim.Stored, c claim.Copy, h claim.Holding, live bool) (claim.Stored, claim.Begun) {
				if st.State == claim.StateDone {
					st.State = claim.StateFailed
				}
				return start(st, c, h, live)
			}
		}},
	{Name: "a dead-letter decision on record not read: a redelivered copy is called again (Begin)",
		Answers: []Answer{Refuses, Accepts}, Wrap: func(r *Rules) {
			start := r.Start
			r.Start = func(st claim.Stored, c claim.Copy, h claim.Holding, live bool) (claim.Stored, claim.Begun) {
				if st.State == claim.StateDead {
					st.State = claim.StateFailed
				}
				return start(st, c, h, live)
			}
		}},
	{Name: "a live holder ignored: Begin takes a claim in flight elsewhere",
		Answers: []Answer{Accepts, AlwaysBusy}, Wrap: func(r *Rules) {
			start := r.Start
			r.Start = func(st claim.Stored, c claim.Copy, h claim.Holding, live bool) (claim.Stored, claim.Begun) {
				return start(st, c, h, false)
			}
		}},
	{Name: "the lineage not read: a copy whose step was carried out is acted on again (Begin)",
		Answers: []Answer{AlwaysBusy, Accepts}, Delays: 1, Wrap: func(r *Rules) {
			start := r.Start
			r.Start = func(st claim.Stored, c claim.Copy, h claim.Holding, live bool) (claim.Stored, claim.Begun) {
				lin := st.Lineage
				st.Lineage = 0
				after, b := start(st, c, h, live)
				if b.Result != claim.Acquired || !b.Restart {
					after.Lineage = lin
				}
				return after, b
			}
		}},
	{Name: "a 201 not held for its record: given back while the store does not answer (HeldForRecord)",
		Answers: []Answer{Accepts, AlwaysBusy}, Wrap: func(r *Rules) {
			r.HeldForRecord = func(claim.Attempt) bool { return false }
		}},
	{Name: "the retry burnt by a crash: redelivered alone dead-letters a transient failure (Decide)",
		Answers: []Answer{BusyOnce, Accepts}, Wrap: func(r *Rules) {
			decide := r.Decide
			r.Decide = func(status int, accept claim.AcceptSet, redelivered bool, prior int) claim.Outcome {
				return decide(status, accept, redelivered, 1)
			}
		}},
	{Name: "the plan's end ignored: a failure after the last delay is delayed again (Delayed)",
		Answers: []Answer{AlwaysBusy, Accepts}, Delays: 1, Wrap: func(r *Rules) {
			delayed := r.Delayed
			r.Delayed = func(out claim.Outcome, delays []time.Duration, done int, retryAfter time.Duration) (claim.Outcome, time.Duration) {
				if o, d := delayed(out, delays, done, retryAfter); o != claim.OutFailed {
					return o, d
				}
				return claim.OutDelayed, delays[len(delays)-1]
			}
		}},
	{Name: "a transient failure not counted on record (Finish)",
		Answers: []Answer{AlwaysBusy, Accepts}, Wrap: func(r *Rules) {
			finish := r.Finish
			r.Finish = func(st claim.Stored, a claim.Attempt, h claim.Holding) (claim.Stored, claim.Outcome) {
				after, out := finish(st, a, h)
				after.Failures = st.Failures
				return after, out
			}
		}},
	// The model's first finding, fixed in the relay (handle.go's begin):
	// its copy, fresh at step 0, restarts the claim's lineage.
	{Name: "a worker goes on after its channel closed before its Begin (the relay)",
		Answers: []Answer{AlwaysBusy, Accepts}, Delays: 1, StaleGoesOn: true},
	// The rules before the fixes of the checker's findings in claim
	// (docs/model.md, "What it found"): the checker still kills each.
	{Name: "a late holder overwrites a dead-letter decision it does not hold (Finish, before finding 2's fix)",
		Answers: []Answer{AlwaysBusy, Accepts}, Delays: 1, Wrap: func(r *Rules) {
			finish := r.Finish
			r.Finish = func(st claim.Stored, a claim.Attempt, h claim.Holding) (claim.Stored, claim.Outcome) {
				if st.State == claim.StateDead && a.Outcome.Action.State() != claim.StateDone {
					st.State = claim.StateFailed // taken for one nobody holds: the record takes a's outcome
				}
				return finish(st, a, h)
			}
		}},
	{Name: "a delayed sibling of a dead-lettered copy taken for a replay (Begin, before finding 3's fix)",
		Answers: []Answer{Refuses, BusyOnce}, Delays: 1, Wrap: func(r *Rules) {
			start := r.Start
			r.Start = func(st claim.Stored, c claim.Copy, h claim.Holding, live bool) (claim.Stored, claim.Begun) {
				if st.State != claim.StateDead || !c.Fresh || c.Step == 0 {
					return start(st, c, h, live)
				}
				// Read as a failed record: a fresh copy of a step not
				// carried out is acquired.
				failed := st
				failed.State = claim.StateFailed
				after, b := start(failed, c, h, live)
				if b.Result != claim.Acquired {
					return st, b
				}
				return after, b
			}
		}},
	{Name: "a late holder's dead-letter decision, kept out of another's claim, raises the lineage (Finish, before finding 4's fix)",
		Answers: []Answer{AlwaysBusy}, Delays: 1, Faults: 3, Wrap: func(r *Rules) {
			finish := r.Finish
			r.Finish = func(st claim.Stored, a claim.Attempt, h claim.Holding) (claim.Stored, claim.Outcome) {
				after, out := finish(st, a, h)
				if st.State == claim.StateInFlight && st.Holder != "" && st.Holder != h.Holder && a.Outcome.Action == claim.DeadLetter {
					after.Lineage = max(after.Lineage, a.Lineage)
				}
				return after, out
			}
		}},
}

// FigureBudget is the figures' budget: every fault kind once, crashes and
// lost acks twice.
func FigureBudget() [NumFaults]int {
	b := Budgets(1)
	b[Crash], b[LostAck] = 2, 2
	return b
}
