package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/topo"
)

// TestRetryQueuesRequired: --retry-delays without the delay queues is a
// refusal at start (78) that names the remedy, before any claim is taken.
func TestRetryQueuesRequired(t *testing.T) {
	h := newHarness(t)
	h.vh.PublishClaims(t, brokertest.Claims("rq", "C-rq", 2, true)...)
	c := h.start("--max-seconds", "5", "--retry-delays", "1s,10s")
	<-c.done
	if c.code != cli.ExitConfig || !strings.Contains(c.stderr.String(), "run topology -retry-delays 1s,10s") {
		t.Errorf("exit %d:\n%s", c.code, c.stderr.String())
	}
	if h.totalCalls() != 0 {
		t.Errorf("%d calls before the refusal", h.totalCalls())
	}
	h.assertQueues(2, 0, 0)
}

// TestFailOnDead: by default a run that dead-letters most of its claims
// exits 0 and says so on stderr; --fail-on-dead 50 makes it exit 1.
func TestFailOnDead(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{{nil, 0}, {[]string{"--fail-on-dead", "50"}, cli.ExitFailure}, {[]string{"--fail-on-dead", "80"}, 0}} {
		h := newHarness(t)
		claims := brokertest.Claims("fd", "C-fd", 1, true)
		claims = append(claims, brokertest.Claims("fd-nodocs", "C-fdn", 3, false)...)
		h.vh.PublishClaims(t, claims...)
		c := h.runUntil("drained", func() bool { return h.drained() && h.vh.Depth(t, topo.DeadQueue) == 3 }, tc.args...)
		if c.code != tc.code || !strings.Contains(c.stderr.String(), "3 of the 4 claims settled this run were dead-lettered") {
			t.Errorf("%v: exit %d, want %d:\n%s", tc.args, c.code, tc.code, c.stderr.String())
		}
	}
}

// TestTraceparentJSONLog: a message's traceparent reaches the partner as
// Traceparent, and with --log-format json the claim's line is a JSON object
// with message_id, claim_id and trace_id.
func TestTraceparentJSONLog(t *testing.T) {
	h := newHarness(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Traceparent"))
		mu.Unlock()
		w.WriteHeader(201)
	}))
	t.Cleanup(srv.Close)
	h.url = srv.URL
	h.vh.Publish(t, amqp.Publishing{MessageId: "tp-1", Headers: amqp.Table{"traceparent": tp}, Body: brokertest.Claim("tp-1", "C-tp", "r.pdf")})
	c := h.runUntil("delivered", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 1 && h.drained() }, "--log-format", "json")
	if got[0] != tp {
		t.Errorf("partner got Traceparent %q", got[0])
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(c.stderr.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		if m["msg"] == "claim" {
			found = m["message_id"] == "tp-1" && m["claim_id"] == "C-tp" && m["trace_id"] == tp[3:35]
		}
	}
	if !found {
		t.Errorf("no claim line with message_id, claim_id and trace_id:\n%s", c.stderr.String())
	}
}
