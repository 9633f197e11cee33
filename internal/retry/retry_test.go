package retry

import (
	"net/http"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // "" for an error
	}{
		{"1s,10s,1m", "1s,10s,1m"},
		{" 5s , 30s ", "5s,30s"},
		{"90s,2h", "90s,2h"},
		{"500ms", ""},
		{"0s", ""},
		{"25h", ""},
		{"1s,", ""},
		{"1.5s", ""},
		{"ten", ""},
	} {
		p, err := Parse(tc.in)
		if got := p.String(); (err == nil) != (tc.want != "") || (err == nil && got != tc.want) {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestNext(t *testing.T) {
	p, _ := Parse("1s,5s,30s")
	for _, tc := range []struct {
		done       int
		retryAfter time.Duration
		want       time.Duration
		ok         bool
	}{
		{0, 0, time.Second, true},
		{1, 0, 5 * time.Second, true},
		{2, 0, 30 * time.Second, true},
		{3, 0, 0, false},                            // spent: the DLQ
		{0, 2 * time.Second, 5 * time.Second, true}, // the shortest no sooner than asked
		{0, 5 * time.Second, 5 * time.Second, true}, // exactly a queue's
		{1, time.Second, 5 * time.Second, true},     // the plan's own is longer
		{0, time.Hour, 30 * time.Second, true},      // capped by the longest
		{3, 2 * time.Second, 0, false},              // Retry-After adds no retry
	} {
		got, ok := p.Next(tc.done, tc.retryAfter)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Next(%d, %s) = %s, %v; want %s, %v", tc.done, tc.retryAfter, got, ok, tc.want, tc.ok)
		}
	}
	if q := p.Queues(); len(q) != 3 || QueueName(q[2]) != "claim.retry.30s" {
		t.Errorf("queues %v", q)
	}
	if QueueName(time.Minute) != "claim.retry.1m" || QueueName(2*time.Hour) != "claim.retry.2h" {
		t.Errorf("names: %s %s", QueueName(time.Minute), QueueName(2*time.Hour))
	}
}

// death is x-death as the broker writes it, the most recent first.
func death(queue, reason string) amqp.Table {
	return amqp.Table{"queue": queue, "reason": reason, "count": int64(1)}
}

func TestDone(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    amqp.Table
		want int
	}{
		{"fresh", nil, 0},
		{"back from a delay queue", amqp.Table{Header: int32(2), "x-death": []any{death("claim.retry.5s", "expired"), death("claim.retry.1s", "expired")}}, 2},
		{"replayed by dlq: x-death stripped", amqp.Table{Header: int32(3), "x-eaimq-replays": int32(1)}, 0},
		{"dead-lettered from claim.in last", amqp.Table{Header: int32(3), "x-death": []any{death("claim.in", "rejected"), death("claim.retry.5s", "expired")}}, 0},
		{"header without x-death (republished)", amqp.Table{Header: int32(1)}, 0},
	} {
		if got := Done(tc.h); got != tc.want {
			t.Errorf("%s: Done = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestNextHeaders(t *testing.T) {
	h := NextHeaders(amqp.Table{"traceparent": "x"}, 0, "a")
	h = NextHeaders(h, 1, "b")
	if h[Header] != int32(2) || len(h[HistoryHeader].([]any)) != 2 || h["traceparent"] != "x" {
		t.Errorf("headers %v", h)
	}
	// A copy that starts over starts its history over.
	if h := NextHeaders(h, 0, "c"); len(h[HistoryHeader].([]any)) != 1 {
		t.Errorf("history not restarted: %v", h)
	}
	// Each copy sent gets a token of its own, even two sent for one step.
	a, b := NextHeaders(h, 1, "d"), NextHeaders(h, 1, "d")
	ta, _ := a[TokenHeader].(string)
	tb, _ := b[TokenHeader].(string)
	if len(ta) != 16 || ta == tb || ta == h[TokenHeader] {
		t.Errorf("tokens %q and %q (before: %v): want two new 16-digit tokens", ta, tb, h[TokenHeader])
	}
}

// TestToken: a copy back from a delay queue has its token; a first try, or
// a claim that starts over with an old copy's header, has none.
func TestToken(t *testing.T) {
	back := []any{death("claim.retry.1s", "expired")}
	for _, tc := range []struct {
		name string
		h    amqp.Table
		want string
	}{
		{"back from a delay queue", amqp.Table{Header: int32(1), TokenHeader: "t1", "x-death": back}, "t1"},
		{"a first try", nil, ""},
		{"replayed by dlq: x-death stripped", amqp.Table{Header: int32(1), TokenHeader: "t1"}, ""},
		{"dead-lettered from claim.in last", amqp.Table{Header: int32(1), TokenHeader: "t1", "x-death": []any{death("claim.in", "rejected"), back[0]}}, ""},
	} {
		if got := Token(tc.h); got != tc.want {
			t.Errorf("%s: Token = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"2", 2 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"0", 0},
		{"-3", 0},
		{"", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"999999999", MaxDelay},
	} {
		if got := RetryAfter(tc.in, now); got != tc.want {
			t.Errorf("RetryAfter(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
