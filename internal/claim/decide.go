package claim

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Decide turns the partner's answer into what happens to the delivery. It
// is the one place that reads an HTTP status; everything after it (the
// store, the summary, dlq) speaks the Outcome it returns.
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
func Decide(status int, accept AcceptSet, redelivered bool, priorFailures int) Outcome {
	switch {
	case accept.Has(status):
		return OutDelivered
	case status >= 200 && status < 300:
		return OutUnexpected
	case status == 408 || status == 409 || status == 429:
		// transient, below
	case status >= 400 && status < 500:
		return OutRejected
	}
	if redelivered && priorFailures > 0 {
		return OutFailed
	}
	return OutRetry
}

// Delayed replaces the lab's requeue-once rule when --retry-delays is set
// (delays: the plan, retry.Plan.Delays): a transient outcome (the one
// retry, or the failure after it) waits out the plan's next delay (Next)
// in a delay queue, no shorter than the partner's Retry-After; only a
// failure after the last delay is dead-lettered (done is the retries
// behind this copy). Other outcomes are left as they are, with no delay.
func Delayed(out Outcome, delays []time.Duration, done int, retryAfter time.Duration) (Outcome, time.Duration) {
	if out != OutRetry && out != OutFailed {
		return out, 0
	}
	if d, ok := Next(delays, done, retryAfter); ok {
		return OutDelayed, d
	}
	return OutFailed, 0
}

// Next is the delay before retry number done+1 of a plan of delays, or
// false when the plan is spent and the claim goes to the DLQ. A
// Retry-After from the partner (0 when none) raises it to the shortest
// delay of the plan that is no sooner, capped by the longest: the claim
// is never retried before the partner asked, unless it asked for more
// than the operator allows.
func Next(delays []time.Duration, done int, retryAfter time.Duration) (time.Duration, bool) {
	if done < 0 || done >= len(delays) {
		return 0, false
	}
	d := delays[done]
	if retryAfter <= d {
		return d, true
	}
	qs := slices.Clone(delays)
	slices.Sort(qs)
	for _, q := range qs {
		if q >= retryAfter {
			return q, true
		}
	}
	return qs[len(qs)-1], true
}

// HeldForRecord reports whether the outcome of a has been acted on by the
// world already, so that its delivery waits, unacked, for its record
// rather than go back to the queue while the store does not answer: a 201
// the partner gave, or a delayed copy the broker confirmed (its lineage
// raised). Given back, its next copy would reach the partner again.
func HeldForRecord(a Attempt) bool {
	return a.Outcome == OutDelivered || (a.Outcome.Action == Delay && a.Lineage > 0)
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
