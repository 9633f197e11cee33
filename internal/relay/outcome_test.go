package relay

import (
	"testing"
	"time"

	"eaimq/internal/claim"
	"eaimq/internal/retry"
)

func TestDecide(t *testing.T) {
	only201 := AcceptSet{201}
	for _, tc := range []struct {
		status        int
		accept        AcceptSet
		redelivered   bool
		priorFailures int
		want          claim.Outcome
	}{
		{201, only201, false, 0, claim.OutDelivered},
		{201, only201, true, 1, claim.OutDelivered},
		{200, only201, false, 0, claim.OutUnexpected}, // a proxy's or health page's 200: never delivered
		{204, only201, false, 0, claim.OutUnexpected},
		{202, only201, true, 1, claim.OutUnexpected},
		{202, AcceptSet{201, 202}, false, 0, claim.OutDelivered}, // widened on purpose
		{422, only201, false, 0, claim.OutRejected},
		{400, only201, false, 0, claim.OutRejected},
		{404, only201, true, 0, claim.OutRejected},
		{503, only201, false, 0, claim.OutRetry},
		{503, only201, true, 0, claim.OutRetry},  // redelivered after a crash: not failed yet
		{503, only201, false, 3, claim.OutRetry}, // a fresh copy: its first delivery
		{503, only201, true, 1, claim.OutFailed}, // failed, requeued, failed again
		{0, only201, false, 0, claim.OutRetry},   // no answer (refused, reset, timeout)
		{0, only201, true, 1, claim.OutFailed},
		{500, only201, true, 1, claim.OutFailed},
		{408, only201, false, 0, claim.OutRetry},
		{429, only201, true, 1, claim.OutFailed},
		{409, only201, false, 0, claim.OutRetry}, // the draft's key in progress: come back
		{409, only201, true, 0, claim.OutRetry},
		{409, only201, true, 1, claim.OutFailed}, // the requeue-once rule, as any transient failure
		{302, only201, false, 0, claim.OutRetry}, // unexpected: the transient rule, never a loop
		{302, only201, true, 1, claim.OutFailed},
		{100, only201, true, 1, claim.OutFailed},
	} {
		got := decide(tc.status, tc.accept, tc.redelivered, tc.priorFailures)
		if got != tc.want {
			t.Errorf("status %d accept %v redelivered=%v prior=%d: %v, want %v", tc.status, tc.accept, tc.redelivered, tc.priorFailures, got, tc.want)
		}
	}
}

func TestDelayed(t *testing.T) {
	plan, _ := retry.Parse("1s,5s")
	for _, tc := range []struct {
		in         claim.Outcome
		done       int
		retryAfter time.Duration
		want       claim.Outcome
		delay      time.Duration
	}{
		{claim.OutRetry, 0, 0, claim.OutDelayed, time.Second},
		{claim.OutFailed, 1, 0, claim.OutDelayed, 5 * time.Second}, // the lab's "failed twice" is not the end here
		{claim.OutRetry, 2, 0, claim.OutFailed, 0},                 // after the last delay: the DLQ
		{claim.OutRetry, 0, 2 * time.Second, claim.OutDelayed, 5 * time.Second},
		{claim.OutDelivered, 0, 0, claim.OutDelivered, 0},
		{claim.OutRejected, 0, 0, claim.OutRejected, 0},                                 // a 4xx is not retried later either
		{decide(409, AcceptSet{201}, true, 1), 1, 0, claim.OutDelayed, 5 * time.Second}, // a 409 waits out the next delay
		{claim.OutUnexpected, 0, 0, claim.OutUnexpected, 0},
	} {
		got, d := delayed(tc.in, plan, tc.done, tc.retryAfter)
		if got != tc.want || d != tc.delay {
			t.Errorf("delayed(%v, done %d, retry-after %s) = %v, %s; want %v, %s", tc.in, tc.done, tc.retryAfter, got, d, tc.want, tc.delay)
		}
	}
}
