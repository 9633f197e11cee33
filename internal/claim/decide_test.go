package claim

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	only201 := AcceptSet{201}
	for _, tc := range []struct {
		status        int
		accept        AcceptSet
		redelivered   bool
		priorFailures int
		want          Outcome
	}{
		{201, only201, false, 0, OutDelivered},
		{201, only201, true, 1, OutDelivered},
		{200, only201, false, 0, OutUnexpected}, // a proxy's or health page's 200: never delivered
		{204, only201, false, 0, OutUnexpected},
		{202, only201, true, 1, OutUnexpected},
		{202, AcceptSet{201, 202}, false, 0, OutDelivered}, // widened on purpose
		{422, only201, false, 0, OutRejected},
		{400, only201, false, 0, OutRejected},
		{404, only201, true, 0, OutRejected},
		{503, only201, false, 0, OutRetry},
		{503, only201, true, 0, OutRetry},  // redelivered after a crash: not failed yet
		{503, only201, false, 3, OutRetry}, // a fresh copy: its first delivery
		{503, only201, true, 1, OutFailed}, // failed, requeued, failed again
		{0, only201, false, 0, OutRetry},   // no answer (refused, reset, timeout)
		{0, only201, true, 1, OutFailed},
		{500, only201, true, 1, OutFailed},
		{408, only201, false, 0, OutRetry},
		{429, only201, true, 1, OutFailed},
		{409, only201, false, 0, OutRetry}, // the draft's key in progress: come back
		{409, only201, true, 0, OutRetry},
		{409, only201, true, 1, OutFailed}, // the requeue-once rule, as any transient failure
		{302, only201, false, 0, OutRetry}, // unexpected: the transient rule, never a loop
		{302, only201, true, 1, OutFailed},
		{100, only201, true, 1, OutFailed},
	} {
		got := Decide(tc.status, tc.accept, tc.redelivered, tc.priorFailures)
		if got != tc.want {
			t.Errorf("status %d accept %v redelivered=%v prior=%d: %v, want %v", tc.status, tc.accept, tc.redelivered, tc.priorFailures, got, tc.want)
		}
	}
	if s := (AcceptSet{201, 202}).String(); s != "201,202" {
		t.Errorf("AcceptSet.String = %q", s)
	}
}

func TestDelayed(t *testing.T) {
	plan := []time.Duration{time.Second, 5 * time.Second}
	for _, tc := range []struct {
		in         Outcome
		done       int
		retryAfter time.Duration
		want       Outcome
		delay      time.Duration
	}{
		{OutRetry, 0, 0, OutDelayed, time.Second},
		{OutFailed, 1, 0, OutDelayed, 5 * time.Second}, // the lab's "failed twice" is not the end here
		{OutRetry, 2, 0, OutFailed, 0},                 // after the last delay: the DLQ
		{OutRetry, 0, 2 * time.Second, OutDelayed, 5 * time.Second},
		{OutDelivered, 0, 0, OutDelivered, 0},
		{OutRejected, 0, 0, OutRejected, 0},                                       // a 4xx is not retried later either
		{Decide(409, AcceptSet{201}, true, 1), 1, 0, OutDelayed, 5 * time.Second}, // a 409 waits out the next delay
		{OutUnexpected, 0, 0, OutUnexpected, 0},
	} {
		got, d := Delayed(tc.in, plan, tc.done, tc.retryAfter)
		if got != tc.want || d != tc.delay {
			t.Errorf("Delayed(%v, done %d, retry-after %s) = %v, %s; want %v, %s", tc.in, tc.done, tc.retryAfter, got, d, tc.want, tc.delay)
		}
	}
}

func TestNext(t *testing.T) {
	plan := []time.Duration{time.Second, 30 * time.Second, 5 * time.Second} // not sorted on purpose
	for _, tc := range []struct {
		done       int
		retryAfter time.Duration
		want       time.Duration
		ok         bool
	}{
		{0, 0, time.Second, true},
		{1, 0, 30 * time.Second, true},
		{2, 0, 5 * time.Second, true},
		{3, 0, 0, false},                            // spent: the DLQ
		{-1, 0, 0, false},                           // no such retry
		{0, 2 * time.Second, 5 * time.Second, true}, // the shortest no sooner than asked
		{0, 5 * time.Second, 5 * time.Second, true}, // exactly a queue's
		{1, time.Second, 30 * time.Second, true},    // the plan's own is longer
		{0, time.Hour, 30 * time.Second, true},      // capped by the longest
		{3, 2 * time.Second, 0, false},              // Retry-After adds no retry
	} {
		got, ok := Next(plan, tc.done, tc.retryAfter)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Next(%d, %s) = %s, %v; want %s, %v", tc.done, tc.retryAfter, got, ok, tc.want, tc.ok)
		}
	}
	if plan[1] != 30*time.Second {
		t.Error("Next sorted the caller's plan")
	}
}

func TestHeldForRecord(t *testing.T) {
	for _, tc := range []struct {
		a    Attempt
		want bool
	}{
		{Attempt{Outcome: OutDelivered}, true},                 // the partner has it
		{Attempt{Outcome: OutDelayed, Lineage: 1}, true},       // its delayed copy is confirmed
		{Attempt{Outcome: OutDelayed}, false},                  // no copy confirmed
		{Attempt{Outcome: OutRetry}, false},                    // the partner did nothing
		{Attempt{Outcome: OutRejected, Lineage: 2}, false},     // its next copy is rejected again
		{Attempt{Outcome: OutDuplicate}, false},                // no call
		{Attempt{Outcome: Outcome{Ack, Delivered}}, true},      // one value, one spelling
		{Attempt{Outcome: OutUnexpected, Called: true}, false}, // a 200 is not a creation
	} {
		if got := HeldForRecord(tc.a); got != tc.want {
			t.Errorf("HeldForRecord(%v, lineage %d) = %v, want %v", tc.a.Outcome, tc.a.Lineage, got, tc.want)
		}
	}
}
