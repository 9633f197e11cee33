package model

import (
	"errors"
	"fmt"

	"eaimq/internal/claim"
)

// StoreStep is one store operation along a trace, with what the model's
// rules say of it: a replay makes the same call on a real store and
// compares.
type StoreStep struct {
	N      int    // the trace's step
	Worker int    // the worker, named as the trace names it (1, 2, ...)
	ID     string // the claim's message_id: A, B, ...
	Kind   string // "begin", "finish", or "lose" (the holder's lease runs out)
	Copy   claim.Copy
	// Begun is what Begin decides (begin).
	Begun claim.Begun
	// Attempt and Recorded are what Finish records and returns (finish).
	Attempt  claim.Attempt
	Recorded claim.Outcome
	// Record is the model's record of the claim after the step.
	Record claim.Stored
}

// ErrLeft says that a trace leaves the model under the rules it is
// replayed with: a mutant's trace goes where the production rules do not.
// The steps up to there, the one that goes another way included, are
// still the store's to replay.
var ErrLeft = errors.New("the trace leaves the model under these rules")

// StoreSteps replays r's trace under cfg (the same claims and consumers;
// its rules may differ from the search's, so a mutant's trace can be
// replayed under the production rules) and lists its store operations,
// up to where the trace leaves the model under cfg's rules (ErrLeft). A
// trace through a crash or a store fault cannot be replayed on a live
// store: it returns another error.
func (r Result) StoreSteps(cfg Config) ([]StoreStep, error) {
	k := newChecker(cfg)
	s := k.initial()
	names := make([]int, len(s.workers))
	for i := range names {
		names[i] = i + 1
	}
	var steps []StoreStep
	for n, l := range r.path {
		wi := int(l.w)
		w := s.workers[wi]
		step := StoreStep{N: n + 1, Worker: names[wi], ID: claimName(w.m.c), Copy: k.copyOf(w.m)}
		switch {
		case l.kind == kBegin && !s.storeDown:
			c := s.claims[w.m.c]
			st, b := k.r.Start(c.r.stored(), step.Copy, k.holding(wi), c.r.holder != gone && !c.stale)
			step.Kind, step.Begun, step.Record = "begin", b, st
		case (l.kind == kFinish || l.kind == kFault+uint8(ConfirmLost)) && !s.storeDown:
			step.Kind, step.Attempt = "finish", k.attempt(w)
			step.Record, step.Recorded = k.r.Finish(s.claims[w.m.c].r.stored(), step.Attempt, k.holding(wi))
		case l.kind == kFault+uint8(LeaseExpired):
			step.Kind = "lose"
		case l.kind == kLeaseOut:
			h := s.claims[l.i].r.holder
			step.Kind, step.Worker, step.ID = "lose", names[h-1], claimName(l.i)
		case l.kind == kFault+uint8(Crash) || l.kind == kFault+uint8(StoreFail) || l.kind == kFault+uint8(StoreUnknown) || l.kind == kFault+uint8(StoreOutage):
			return nil, fmt.Errorf("step %d: a %s cannot be replayed on a live store", n+1, Fault(l.kind-kFault))
		}
		if step.Kind != "" {
			steps = append(steps, step)
		}
		found := false
		for _, e := range k.succ(s) {
			if e.l == l {
				next := make([]int, len(names))
				for to, from := range e.perm {
					next[to] = names[from]
				}
				s, names, found = e.s, next, true
				break
			}
		}
		if !found {
			return steps, fmt.Errorf("step %d: %w", n+1, ErrLeft)
		}
	}
	return steps, nil
}
