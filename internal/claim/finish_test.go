package claim

import "testing"

func TestHeldElsewhere(t *testing.T) {
	me := Holding{Holder: "me"}
	for _, tc := range []struct {
		r    Stored
		live bool
		want bool
	}{
		{Stored{State: StateInFlight, Holder: "other"}, true, true},
		{Stored{State: StateInFlight, Holder: "other"}, false, false}, // lease out, or its process gone
		{Stored{State: StateInFlight, Holder: "me"}, true, false},     // its own
		{Stored{State: StateInFlight}, true, false},                   // nobody's
		{Stored{State: StateFailed, Holder: "other"}, true, false},    // not in flight
		{Stored{}, true, false},
	} {
		if got := HeldElsewhere(tc.r, me, tc.live); got != tc.want {
			t.Errorf("HeldElsewhere(%+v, live %v) = %v, want %v", tc.r, tc.live, got, tc.want)
		}
	}
}

func TestStart(t *testing.T) {
	me := Holding{Holder: "me"}
	fresh, redelivered := Copy{Fresh: true}, Copy{}
	for _, tc := range []struct {
		name  string
		r     Stored
		c     Copy
		live  bool
		want  Stored
		begun BeginResult
	}{
		{"no record", Stored{}, fresh, false,
			Stored{State: StateInFlight, Holder: "me"}, Acquired},
		{"failed, redelivered: keeps its count and lineage", Stored{State: StateFailed, Reason: Retry, Attempts: 1, Failures: 1, Lineage: 1}, Copy{Step: 1}, false,
			Stored{State: StateInFlight, Reason: Retry, Attempts: 1, Failures: 1, Lineage: 1, Holder: "me"}, Acquired},
		{"failed, a fresh first try: count and lineage start over", Stored{State: StateFailed, Reason: Retry, Attempts: 1, Failures: 1, Lineage: 2}, fresh, false,
			Stored{State: StateInFlight, Reason: Retry, Attempts: 1, Lineage: 0, Holder: "me"}, Acquired},
		{"dead, a replay keeps the dead token until its own outcome", Stored{State: StateDead, Reason: FailedTwice, Attempts: 3, Failures: 2, Lineage: 2, DeadToken: "t"}, fresh, false,
			Stored{State: StateInFlight, Reason: FailedTwice, Attempts: 3, DeadToken: "t", Holder: "me"}, Acquired},
		{"in flight for a live other: untouched", Stored{State: StateInFlight, Holder: "other", Failures: 1}, redelivered, true,
			Stored{State: StateInFlight, Holder: "other", Failures: 1}, Busy},
		{"in flight for a gone other: taken", Stored{State: StateInFlight, Holder: "other", Failures: 1}, redelivered, false,
			Stored{State: StateInFlight, Holder: "me", Failures: 1}, Acquired},
		{"in flight for itself (a second Begin)", Stored{State: StateInFlight, Holder: "me"}, redelivered, true,
			Stored{State: StateInFlight, Holder: "me"}, Acquired},
		{"done: untouched", Stored{State: StateDone, Reason: Delivered, Attempts: 1}, redelivered, false,
			Stored{State: StateDone, Reason: Delivered, Attempts: 1}, Done},
		{"dead, redelivered: untouched", Stored{State: StateDead, Reason: Rejected, Attempts: 1}, redelivered, false,
			Stored{State: StateDead, Reason: Rejected, Attempts: 1}, DeadBefore},
		{"a step carried out: untouched", Stored{State: StateFailed, Reason: Retry, Lineage: 1}, Copy{Step: 0}, false,
			Stored{State: StateFailed, Reason: Retry, Lineage: 1}, StepDone},
	} {
		got, b := Start(tc.r, tc.c, me, tc.live)
		if got != tc.want || b.Result != tc.begun {
			t.Errorf("%s: Start = %+v, %v; want %+v, %v", tc.name, got, b.Result, tc.want, tc.begun)
		}
		if want := Begin(tc.r.Found(HeldElsewhere(tc.r, me, tc.live)), tc.c); b != want {
			t.Errorf("%s: Start's Begun %+v is not Begin's %+v", tc.name, b, want)
		}
	}
}

func TestFinish(t *testing.T) {
	me := Holding{Holder: "me"}
	called := func(o Outcome) Attempt { return Attempt{Outcome: o, Called: true} }
	for _, tc := range []struct {
		name string
		r    Stored
		a    Attempt
		want Stored
		out  Outcome
	}{
		{"delivered", Stored{State: StateInFlight, Holder: "me"}, called(OutDelivered),
			Stored{State: StateDone, Reason: Delivered, Attempts: 1}, OutDelivered},
		{"a transient failure counts", Stored{State: StateInFlight, Holder: "me", Attempts: 2, Failures: 1}, called(OutRetry),
			Stored{State: StateFailed, Reason: Retry, Attempts: 3, Failures: 2}, OutRetry},
		{"a delayed copy confirmed raises the lineage", Stored{State: StateInFlight, Holder: "me", Lineage: 1}, Attempt{Outcome: OutDelayed, Called: true, Lineage: 2},
			Stored{State: StateFailed, Reason: Retry, Attempts: 1, Failures: 1, Lineage: 2}, OutDelayed},
		{"dead-lettered: keeps its copy's token", Stored{State: StateInFlight, Holder: "me", Failures: 1, DeadToken: "old"}, Attempt{Outcome: OutFailed, Called: true, Token: "t2", Lineage: 3},
			Stored{State: StateDead, Reason: FailedTwice, Attempts: 1, Failures: 1, Lineage: 3, DeadToken: "t2"}, OutFailed},
		{"dead-lettered without a token: none on record", Stored{State: StateInFlight, Holder: "me", DeadToken: "old"}, called(OutRejected),
			Stored{State: StateDead, Reason: Rejected, Attempts: 1}, OutRejected},
		{"another outcome keeps the token on record", Stored{State: StateInFlight, Holder: "me", DeadToken: "old"}, Attempt{Outcome: OutRetry, Called: true, Token: "t"},
			Stored{State: StateFailed, Reason: Retry, Attempts: 1, Failures: 1, DeadToken: "old"}, OutRetry},
		{"no record, no Begin (no id): kept anyway", Stored{}, Attempt{Outcome: OutNoID},
			Stored{State: StateDead, Reason: NoID}, OutNoID},
		{"no record, a call", Stored{}, called(OutRetry),
			Stored{State: StateFailed, Reason: Retry, Attempts: 1, Failures: 1}, OutRetry},
		{"done is never overwritten", Stored{State: StateDone, Reason: Delivered, Attempts: 1}, called(OutRejected),
			Stored{State: StateDone, Reason: Delivered, Attempts: 2}, OutDuplicate},
		{"done, a second acceptance is a duplicate", Stored{State: StateDone, Reason: Delivered, Attempts: 1}, called(OutDelivered),
			Stored{State: StateDone, Reason: Delivered, Attempts: 2}, OutDuplicate},
		{"done, the lineage still rises", Stored{State: StateDone, Reason: Delivered, Lineage: 1}, Attempt{Outcome: OutDelayed, Lineage: 3},
			Stored{State: StateDone, Reason: Delivered, Lineage: 3}, OutDuplicate},
		{"a late holder leaves another's claim; its confirmed delayed copy raises the lineage", Stored{State: StateInFlight, Holder: "other", Failures: 1, Reason: Retry}, Attempt{Outcome: OutDelayed, Called: true, Token: "t", Lineage: 2},
			Stored{State: StateInFlight, Holder: "other", Failures: 1, Reason: Retry, Attempts: 1, Lineage: 2}, OutDelayed},
		{"a late holder's dead-letter decision does not raise the lineage", Stored{State: StateInFlight, Holder: "other", Failures: 1, Reason: Retry, Lineage: 1}, Attempt{Outcome: OutFailed, Called: true, Token: "t", Lineage: 2},
			Stored{State: StateInFlight, Holder: "other", Failures: 1, Reason: Retry, Attempts: 1, Lineage: 1}, OutFailed},
		{"a late holder's delayed retry keeps a dead record", Stored{State: StateDead, Reason: FailedTwice, Attempts: 2, Failures: 1, Lineage: 2, DeadToken: "t1"}, Attempt{Outcome: OutDelayed, Called: true, Token: "", Lineage: 1},
			Stored{State: StateDead, Reason: FailedTwice, Attempts: 3, Failures: 1, Lineage: 2, DeadToken: "t1"}, OutDelayed},
		{"a late holder's dead-letter decision keeps a dead record, its token, and raises the lineage", Stored{State: StateDead, Reason: Rejected, Attempts: 1, Lineage: 1, DeadToken: "t1"}, Attempt{Outcome: OutFailed, Called: true, Token: "t2", Lineage: 2},
			Stored{State: StateDead, Reason: Rejected, Attempts: 2, Lineage: 2, DeadToken: "t1"}, OutFailed},
		{"an acceptance overwrites a dead record", Stored{State: StateDead, Reason: Rejected, Attempts: 1, DeadToken: "t1"}, called(OutDelivered),
			Stored{State: StateDone, Reason: Delivered, Attempts: 2, DeadToken: "t1"}, OutDelivered},
		{"a late holder's acceptance is the truth", Stored{State: StateInFlight, Holder: "other", Failures: 1}, called(OutDelivered),
			Stored{State: StateDone, Reason: Delivered, Attempts: 1, Failures: 1}, OutDelivered},
		{"a claim nobody holds takes the outcome", Stored{State: StateFailed, Reason: Retry, Failures: 1}, called(OutFailed),
			Stored{State: StateDead, Reason: FailedTwice, Attempts: 1, Failures: 1}, OutFailed},
		{"in flight, no holder named", Stored{State: StateInFlight}, called(OutRetry),
			Stored{State: StateFailed, Reason: Retry, Attempts: 1, Failures: 1}, OutRetry},
		{"the lineage never goes back", Stored{State: StateInFlight, Holder: "me", Lineage: 3}, Attempt{Outcome: OutRetry, Called: true, Lineage: 1},
			Stored{State: StateFailed, Reason: Retry, Attempts: 1, Failures: 1, Lineage: 3}, OutRetry},
		{"a superseded copy, no call", Stored{State: StateFailed, Reason: Retry, Lineage: 1}, Attempt{Outcome: OutSuperseded},
			Stored{State: StateDone, Reason: Superseded, Lineage: 1}, OutSuperseded},
		{"no action: nothing changes", Stored{State: StateInFlight, Holder: "me", Attempts: 1}, Attempt{Called: true},
			Stored{State: StateInFlight, Holder: "me", Attempts: 1}, Outcome{}},
	} {
		got, out := Finish(tc.r, tc.a, me)
		if got != tc.want || out != tc.out {
			t.Errorf("%s:\n Finish(%+v, %v) =\n  %+v, %v\n want\n  %+v, %v", tc.name, tc.r, tc.a.Outcome, got, out, tc.want, tc.out)
		}
	}
}
