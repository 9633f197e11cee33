// Package retry is the consumer's delayed retries (--retry-delays): which
// delay a transient failure waits, in which delay queue, how many retries a
// copy has behind it, and what a partner's Retry-After asks for.
//
// A claim that failed transiently leaves claim.in for a delay queue,
// claim.retry.<delay>, whose x-message-ttl holds it for the delay and whose
// dead-letter arguments send it back through eai.claim to claim.in (topology
// -retry-delays declares them). The consumer holds no prefetch slot while a
// claim waits, and the broker keeps it durable meanwhile.
package retry

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/claim"
)

// Header counts the delayed retries behind a copy; HistoryHeader lists
// them, one line per try ("2026-11-30T13:40:01Z 503 -> claim.retry.5s").
// Both ride on the copy to claim.dead, so that dlq show tells the story.
const (
	Header        = "x-eaimq-retries"
	HistoryHeader = "x-eaimq-retry-history"
	// TokenHeader names one delayed copy among the copies of its step: a
	// random word, new for each copy sent, kept on its redeliveries (see
	// claim.Copy.Token).
	TokenHeader = "x-eaimq-copy"
)

// QueuePrefix starts every delay queue's name.
const QueuePrefix = "claim.retry."

// The bounds of one delay: below a second, a retry is the lab's immediate
// requeue under another name; beyond a day, a claim is better in the DLQ
// where an operator sees it.
const (
	MinDelay = time.Second
	MaxDelay = 24 * time.Hour
	MaxCount = 20
)

// Plan is the configured delays, in the order the retries take them.
type Plan struct {
	Delays []time.Duration
}

// Parse reads a -retry-delays value such as "1s,10s,1m": N delays, N
// retries. Each is a whole number of seconds from 1s to 24h.
func Parse(s string) (Plan, error) {
	var p Plan
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < MinDelay || d > MaxDelay || d%time.Second != 0 {
			return Plan{}, fmt.Errorf("-retry-delays %q: comma-separated durations, each whole seconds from 1s to 24h (example: 1s,10s,1m)", s)
		}
		p.Delays = append(p.Delays, d)
	}
	if len(p.Delays) > MaxCount {
		return Plan{}, fmt.Errorf("-retry-delays %q: at most %d delays", s, MaxCount)
	}
	return p, nil
}

// String is the plan as -retry-delays takes it.
func (p Plan) String() string {
	s := make([]string, len(p.Delays))
	for i, d := range p.Delays {
		s[i] = Short(d)
	}
	return strings.Join(s, ",")
}

// Queues are the distinct delays, shortest first: one delay queue each.
func (p Plan) Queues() []time.Duration {
	q := slices.Clone(p.Delays)
	slices.Sort(q)
	return slices.Compact(q)
}

// Short prints d as a queue name wants it: 1s, 90s, 1m, 2h.
func Short(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return fmt.Sprintf("%ds", d/time.Second)
}

// QueueName is the delay queue that holds a claim for d.
func QueueName(d time.Duration) string { return QueuePrefix + Short(d) }

// Next is the delay before retry number done+1, or false when the plan
// is spent and the claim goes to the DLQ: claim.Next decides, Retry-After
// included.
func (p Plan) Next(done int, retryAfter time.Duration) (time.Duration, bool) {
	return claim.Next(p.Delays, done, retryAfter)
}

// Done is the number of delayed retries behind a delivery: its Header, if
// the copy came back from one of our delay queues; otherwise 0. The broker
// puts the most recent dead-lettering first in x-death, so a copy whose
// latest death is the expiry in a claim.retry queue is a retry coming
// back. A claim published again, or replayed by dlq (which strips x-death)
// after it went to claim.dead, starts over, though it may still carry the
// old Header.
func Done(h amqp.Table) int {
	deaths, _ := h["x-death"].([]any)
	if len(deaths) == 0 {
		return 0
	}
	last, _ := deaths[0].(amqp.Table)
	q, _ := last["queue"].(string)
	if reason, _ := last["reason"].(string); reason != "expired" || !strings.HasPrefix(q, QueuePrefix) {
		return 0
	}
	switch n := h[Header].(type) {
	case int32:
		return int(n)
	case int64:
		return int(n)
	case int:
		return n
	}
	return 0
}

// Token is the TokenHeader of a delivery that came back from a delay queue
// (Done above 0), else "": a first try's copy has none of its own, and a
// claim that starts over may still carry an old copy's.
func Token(h amqp.Table) string {
	if Done(h) == 0 {
		return ""
	}
	s, _ := h[TokenHeader].(string)
	return s
}

// NextHeaders are the headers of the delayed copy: the delivery's own,
// with the retry count, one line of history and a new TokenHeader. The
// history of a copy that starts over is started over too.
func NextHeaders(h amqp.Table, done int, line string) amqp.Table {
	out := amqp.Table{}
	for k, v := range h {
		out[k] = v
	}
	out[TokenHeader] = newToken()
	var hist []any
	if done > 0 {
		hist, _ = h[HistoryHeader].([]any)
	}
	out[Header] = int32(done + 1)
	out[HistoryHeader] = append(slices.Clone(hist), line)
	return out
}

// newToken is 16 random hex digits: two copies sent for one claim never
// share one.
func newToken() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// HistoryLine is one try as HistoryHeader keeps it.
func HistoryLine(at time.Time, status int, excerpt string, d time.Duration) string {
	what := strconv.Itoa(status)
	if status == 0 {
		what = excerpt
	}
	return fmt.Sprintf("%s %s -> %s", at.UTC().Format(time.RFC3339), what, QueueName(d))
}

// RetryAfter reads a Retry-After header (RFC 9110 §10.2.3): delay-seconds or
// an HTTP date. It returns 0 when there is none or it cannot be read, and
// never a negative delay.
func RetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(MaxDelay/time.Second))) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil || !t.After(now) {
		return 0
	}
	return min(t.Sub(now), MaxDelay)
}
