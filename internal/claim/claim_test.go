package claim

import (
	"encoding/json"
	"testing"
)

func TestBegin(t *testing.T) {
	fresh, redelivered := Copy{Fresh: true}, Copy{}
	for _, c := range []struct {
		name  string
		found Found
		copy  Copy
		want  Begun
	}{
		{"no record", Found{}, fresh, Begun{Result: Acquired, Restart: true}},
		{"no record, redelivered", Found{}, redelivered, Begun{Result: Acquired}},
		{"done", Found{State: StateDone, Reason: Delivered}, fresh, Begun{Result: Done}},
		{"done, redelivered", Found{State: StateDone}, redelivered, Begun{Result: Done}},
		{"done, even if in flight elsewhere is claimed", Found{State: StateDone, HeldElsewhere: true}, redelivered, Begun{Result: Done}},
		{"dead, redelivered", Found{State: StateDead, Reason: Rejected}, redelivered, Begun{Result: DeadBefore, Prior: OutRejected}},
		{"dead, fresh copy (a replay)", Found{State: StateDead, Reason: Rejected, Failures: 1}, fresh, Begun{Result: Acquired, Restart: true}},
		{"in flight elsewhere", Found{State: StateInFlight, HeldElsewhere: true, Failures: 1}, redelivered, Begun{Result: Busy}},
		{"in flight elsewhere, fresh", Found{State: StateInFlight, HeldElsewhere: true}, fresh, Begun{Result: Busy}},
		{"in flight, stale holder", Found{State: StateInFlight, Failures: 1}, redelivered, Begun{Result: Acquired, Failures: 1}},
		{"in flight, stale holder, fresh", Found{State: StateInFlight, Failures: 1}, fresh, Begun{Result: Acquired, Restart: true}},
		{"failed, redelivered keeps its count", Found{State: StateFailed, Reason: Retry, Failures: 1}, redelivered, Begun{Result: Acquired, Failures: 1}},
		{"failed, fresh starts over", Found{State: StateFailed, Reason: Retry, Failures: 1}, fresh, Begun{Result: Acquired, Restart: true}},

		// The lineage (--retry-delays): a copy of a step carried out
		// already is acked; the live step and a first try start work.
		{"original redelivered after its delayed copy was confirmed", Found{State: StateFailed, Reason: Retry, Lineage: 1}, Copy{Step: 0}, Begun{Result: StepDone}},
		{"step 1 redelivered after step 2 was scheduled", Found{State: StateFailed, Lineage: 2}, Copy{Step: 1}, Begun{Result: StepDone}},
		{"a second copy of step 1, fresh, after step 2 was scheduled", Found{State: StateFailed, Lineage: 2}, Copy{Fresh: true, Step: 1}, Begun{Result: StepDone}},
		{"the live step, fresh from its delay queue", Found{State: StateFailed, Lineage: 2}, Copy{Fresh: true, Step: 2}, Begun{Result: Acquired}},
		{"the live step, redelivered", Found{State: StateFailed, Lineage: 2, Failures: 2}, Copy{Step: 2}, Begun{Result: Acquired, Failures: 2}},
		{"a first try of a fresh copy starts over", Found{State: StateFailed, Lineage: 2}, Copy{Fresh: true, Step: 0}, Begun{Result: Acquired, Restart: true}},
		{"a sibling of a dead-lettered lineage, fresh", Found{State: StateDead, Reason: FailedTwice, Lineage: 3}, Copy{Fresh: true, Step: 2}, Begun{Result: StepDone}},
		{"dead, redelivered, whatever the lineage: reject again", Found{State: StateDead, Reason: FailedTwice, Lineage: 3}, Copy{Step: 2}, Begun{Result: DeadBefore, Prior: OutFailed}},
		// The dead-lettered copy's token on record: only that copy, or one
		// that cannot be told from it, is rejected again.
		{"dead, the dead-lettered copy redelivered", Found{State: StateDead, Reason: FailedTwice, Lineage: 3, DeadToken: "t1"}, Copy{Step: 2, Token: "t1"}, Begun{Result: DeadBefore, Prior: OutFailed}},
		{"dead, a sibling of the dead-lettered copy redelivered", Found{State: StateDead, Reason: FailedTwice, Lineage: 3, DeadToken: "t1"}, Copy{Step: 2, Token: "t2"}, Begun{Result: StepDone}},
		{"dead, an earlier step's copy redelivered", Found{State: StateDead, Reason: FailedTwice, Lineage: 3, DeadToken: "t1"}, Copy{Step: 0}, Begun{Result: StepDone}},
		{"dead, another token at a step not carried out", Found{State: StateDead, Reason: FailedTwice, Lineage: 3, DeadToken: "t1"}, Copy{Step: 3, Token: "t2"}, Begun{Result: DeadBefore, Prior: OutFailed}},
		{"dead without a token on record, a copy with one", Found{State: StateDead, Reason: Rejected, Lineage: 1}, Copy{Step: 0, Token: "t2"}, Begun{Result: DeadBefore, Prior: OutRejected}},
		// A fresh copy past step 0 on a dead record is a delayed sibling
		// (a replay comes back at step 0), whatever the lineage.
		{"dead, a delayed sibling at the dead-lettered step, fresh", Found{State: StateDead, Reason: Rejected, Lineage: 0}, Copy{Fresh: true, Step: 1, Token: "t2"}, Begun{Result: StepDone}},
		{"dead, a delayed sibling past the lineage, fresh", Found{State: StateDead, Reason: FailedTwice, Lineage: 1, DeadToken: "t1"}, Copy{Fresh: true, Step: 1, Token: "t2"}, Begun{Result: StepDone}},
		{"a replay of a dead-lettered lineage", Found{State: StateDead, Reason: FailedTwice, Lineage: 3}, Copy{Fresh: true}, Begun{Result: Acquired, Restart: true}},
		{"done wins over the lineage", Found{State: StateDone, Lineage: 2}, Copy{Step: 0}, Begun{Result: Done}},
		{"a step carried out, its claim in flight elsewhere", Found{State: StateInFlight, HeldElsewhere: true, Lineage: 2}, Copy{Step: 1}, Begun{Result: StepDone}},
	} {
		if got := Begin(c.found, c.copy); got != c.want {
			t.Errorf("%s: Begin(%+v, %+v) = %+v, want %+v", c.name, c.found, c.copy, got, c.want)
		}
	}
}

func TestStates(t *testing.T) {
	for _, s := range []State{StateInFlight, StateDone, StateFailed, StateDead} {
		if got := ParseState(s.String()); got != s {
			t.Errorf("ParseState(%q) = %v, want %v", s.String(), got, s)
		}
	}
	if ParseState("") != StateNone || ParseState("bogus") != StateNone {
		t.Error("an empty or unknown word is not StateNone")
	}
	for a, want := range map[Action]State{Ack: StateDone, Requeue: StateFailed, Delay: StateFailed, DeadLetter: StateDead, NoAction: StateNone} {
		if got := a.State(); got != want {
			t.Errorf("%v.State() = %v, want %v", a, got, want)
		}
	}
	for s, want := range map[State]Action{StateDone: Ack, StateFailed: Requeue, StateDead: DeadLetter, StateInFlight: NoAction, StateNone: NoAction} {
		if got := s.Action(); got != want {
			t.Errorf("%v.Action() = %v, want %v", s, got, want)
		}
	}
	b, err := json.Marshal(struct{ S State }{StateDead})
	if err != nil || string(b) != `{"S":"dead"}` {
		t.Errorf("JSON of a state: %s %v", b, err)
	}
}

// TestOutcomes holds the one list against every outcome value: each once,
// each with its own index, and each with an action and a reason.
func TestOutcomes(t *testing.T) {
	all := []Outcome{OutDelivered, OutDuplicate, OutRetry, OutDelayed, OutRejected, OutFailed, OutNoID, OutUnexpected, OutUnsendable, OutSuperseded}
	if len(all) != len(Outcomes) {
		t.Fatalf("Outcomes has %d outcomes, want %d", len(Outcomes), len(all))
	}
	for i, o := range Outcomes {
		if o.Index() != i {
			t.Errorf("%v at %d has Index %d", o, i, o.Index())
		}
		if o.Action == NoAction || o.Reason == ReasonUnknown {
			t.Errorf("%v: no action or no reason", o)
		}
	}
	for _, o := range all {
		if o.Index() < 0 {
			t.Errorf("%v is not in Outcomes", o)
		}
	}
	if (Outcome{}).Index() != -1 {
		t.Error("the zero outcome has an index")
	}
}

func TestReasonWords(t *testing.T) {
	for _, w := range ReasonWords() {
		r, ok := ParseReason(w)
		if !ok || r.String() != w {
			t.Errorf("ParseReason(%q) = %v, %v", w, r, ok)
		}
	}
	if r, ok := ParseReason("transient"); !ok || r != FailedTwice {
		t.Errorf("transient: %v %v", r, ok)
	}
	if StoredReason("nonsense") != ReasonUnknown || StoredReason("") != ReasonUnknown {
		t.Error("an unknown stored word is not ReasonUnknown")
	}
	for _, a := range []Action{Ack, Requeue, DeadLetter, Delay} {
		if ParseAction(a.String()) != a {
			t.Errorf("ParseAction(%q)", a.String())
		}
	}
	if ParseAction("") != NoAction {
		t.Error(`ParseAction("") is an action`)
	}
}

func TestAttemptCounts(t *testing.T) {
	for _, c := range []struct {
		a              Attempt
		called, failed int
	}{
		{Attempt{Outcome: OutDelivered, Called: true}, 1, 0},
		{Attempt{Outcome: OutRetry, Called: true}, 1, 1},
		{Attempt{Outcome: OutDelayed, Called: true}, 1, 1},
		{Attempt{Outcome: OutNoID}, 0, 0},
		{Attempt{Outcome: OutFailed, Called: true}, 1, 0},
	} {
		if called, failed := c.a.Counts(); called != c.called || failed != c.failed {
			t.Errorf("%v: counts %d %d, want %d %d", c.a.Outcome, called, failed, c.called, c.failed)
		}
	}
	if (Attempt{Outcome: OutDelivered}).Logged(OutDelivered) {
		t.Error("a delivery is logged as an attempt")
	}
	if !(Attempt{Outcome: OutRejected}).Logged(OutRejected) {
		t.Error("a dead letter is not logged")
	}
}

func TestKey(t *testing.T) {
	if Key("m", "g", nil) != "m" || Key("", "g", nil) != "g" {
		t.Error("Key does not prefer message_id, then guid")
	}
	if k := Key("", "", []byte("x")); len(k) != len("sha256:")+24 || k[:7] != "sha256:" {
		t.Errorf("Key of a body: %q", k)
	}
}
