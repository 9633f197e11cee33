package claim

import (
	"encoding/json"
	"testing"
)

func TestBegin(t *testing.T) {
	for _, c := range []struct {
		name  string
		found Found
		fresh bool
		want  Begun
	}{
		{"no record", Found{}, true, Begun{Result: Acquired}},
		{"no record, redelivered", Found{}, false, Begun{Result: Acquired}},
		{"done", Found{State: StateDone, Reason: Delivered}, true, Begun{Result: Done}},
		{"done, redelivered", Found{State: StateDone}, false, Begun{Result: Done}},
		{"done, even if in flight elsewhere is claimed", Found{State: StateDone, HeldElsewhere: true}, false, Begun{Result: Done}},
		{"dead, redelivered", Found{State: StateDead, Reason: Rejected}, false, Begun{Result: DeadBefore, Prior: OutRejected}},
		{"dead, fresh copy (a replay)", Found{State: StateDead, Reason: Rejected, Failures: 1}, true, Begun{Result: Acquired}},
		{"in flight elsewhere", Found{State: StateInFlight, HeldElsewhere: true, Failures: 1}, false, Begun{Result: Busy}},
		{"in flight elsewhere, fresh", Found{State: StateInFlight, HeldElsewhere: true}, true, Begun{Result: Busy}},
		{"in flight, stale holder", Found{State: StateInFlight, Failures: 1}, false, Begun{Result: Acquired, Failures: 1}},
		{"in flight, stale holder, fresh", Found{State: StateInFlight, Failures: 1}, true, Begun{Result: Acquired}},
		{"failed, redelivered keeps its count", Found{State: StateFailed, Reason: Retry, Failures: 1}, false, Begun{Result: Acquired, Failures: 1}},
		{"failed, fresh starts over", Found{State: StateFailed, Reason: Retry, Failures: 1}, true, Begun{Result: Acquired}},
	} {
		if got := Begin(c.found, c.fresh); got != c.want {
			t.Errorf("%s: Begin(%+v, fresh=%v) = %+v, want %+v", c.name, c.found, c.fresh, got, c.want)
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
	all := []Outcome{OutDelivered, OutDuplicate, OutRetry, OutDelayed, OutRejected, OutFailed, OutNoID, OutUnexpected, OutUnsendable}
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
