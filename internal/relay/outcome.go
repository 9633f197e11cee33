package relay

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"eaimq/internal/claim"
	"eaimq/internal/retry"
)

// decide turns the partner's answer into what happens to the delivery. It
// is the one place that reads an HTTP status; everything after it (the
// store, the summary, dlq) speaks the claim.Outcome it returns.
//
//	status                      outcome
//	in the accepted set (201)   delivered: record, then ack
//	another 2xx                 unexpected status: dead-letter now. A proxy's
//	                            or a health page's 200 is not a creation, and
//	                            recording it as delivered would make every
//	                            later copy a "duplicate" no partner ever saw
//	408, 409, 429               transient: the partner asks us to come back
//	                            (409: the Idempotency-Key draft's "a request
//	                            with this key is still being processed": a
//	                            copy whose first call outlived our timeout,
//	                            or a consumer that died mid-call; the next
//	                            try gets the first call's answer)
//	other 4xx                   rejected: dead-letter now; requeueing makes a
//	                            poison message
//	5xx, no answer (0)          transient
//	1xx, 3xx                    unexpected: the transient rule, so one retry
//	                            then the DLQ, never a loop
//
// A transient failure is requeued once: it is dead-lettered only when the
// delivery is a redelivery AND an earlier failure of this copy is on
// record. Both signals are needed: redelivered alone is also set when a
// consumer died before calling the partner (no failure yet, so it keeps its
// retry), and a record alone would also cover an older copy of a
// republished claim (a fresh copy gets its retry again).
func decide(status int, accept AcceptSet, redelivered bool, priorFailures int) claim.Outcome {
	switch {
	case accept.Has(status):
		return claim.OutDelivered
	case status >= 200 && status < 300:
		return claim.OutUnexpected
	case status == 408 || status == 409 || status == 429:
		// transient, below
	case status >= 400 && status < 500:
		return claim.OutRejected
	}
	if redelivered && priorFailures > 0 {
		return claim.OutFailed
	}
	return claim.OutRetry
}

// delayed replaces the lab's requeue-once rule when --retry-delays is set:
// a transient outcome (the one retry, or the failure after it) waits out
// the plan's next delay in a delay queue, no shorter than the partner's
// Retry-After; only a failure after the last delay is dead-lettered (done
// is the retries behind this copy). Other outcomes are left as they are.
func delayed(out claim.Outcome, plan retry.Plan, done int, retryAfter time.Duration) (claim.Outcome, time.Duration) {
	if out != claim.OutRetry && out != claim.OutFailed {
		return out, 0
	}
	if d, ok := plan.Next(done, retryAfter); ok {
		return claim.OutDelayed, d
	}
	return claim.OutFailed, 0
}

// AcceptSet is the set of statuses that mean "delivered". The contract
// says 201 alone; --accept-status widens it for a partner that documents
// another 2xx as acceptance.
type AcceptSet []int

// Has says whether status means delivered.
func (a AcceptSet) Has(status int) bool { return slices.Contains(a, status) }

// String is the set as --accept-status takes it: 201,202.
func (a AcceptSet) String() string {
	s := make([]string, len(a))
	for i, v := range a {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}
