package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/claim"
	"eaimq/internal/claimsys"
	"eaimq/internal/cli"
	"eaimq/internal/relay"
	"eaimq/internal/retry"
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

// declareDelays declares the delay queues of delays as topology
// -retry-delays does, of type kind.
func declareDelays(t *testing.T, h *harness, kind topo.QueueType, delays ...time.Duration) {
	t.Helper()
	ch := h.vh.Channel(t)
	for _, d := range delays {
		if err := topo.DeclareQueue(ch, topo.RetryQueue(kind, retry.QueueName(d), d)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDelayedRetriesThenDLQ: a claim that keeps failing is tried once and
// once after each delay, then dead-lettered with its history in the
// headers and "after 2 retries" on record; never requeued.
func TestDelayedRetriesThenDLQ(t *testing.T) {
	h := newHarness(t)
	declareDelays(t, h, topo.Classic, time.Second, 2*time.Second)
	h.vh.PublishClaims(t, brokertest.Claim("dl-busy", "BUSY-dl", "r.pdf"))
	start := time.Now()
	c := h.runUntil("dead-lettered", func() bool { return h.vh.Depth(t, topo.DeadQueue) == 1 }, "--retry-delays", "1s,2s", "--json")
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("dead-lettered after %s: sooner than its delays (1s + 2s)", took)
	}
	if n := h.calls("dl-busy"); n != 3 {
		t.Errorf("called %d times, want 3 (the first try and 2 retries)", n)
	}
	var s relay.Summary
	json.Unmarshal([]byte(c.stdout.String()), &s)
	if s.Delayed != 2 || s.FailedTwice != 1 || s.Requeued != 0 {
		t.Errorf("summary %+v", s)
	}
	dead := h.vh.Drain(t, topo.DeadQueue)
	if len(dead) != 1 {
		t.Fatalf("%d in claim.dead", len(dead))
	}
	hist, _ := dead[0].Headers[retry.HistoryHeader].([]any)
	if dead[0].Headers[retry.Header] != int32(2) || len(hist) != 2 || !strings.Contains(hist[1].(string), "503 -> claim.retry.2s") {
		t.Errorf("headers %v", dead[0].Headers)
	}
	if !strings.Contains(c.stderr.String(), "transient failure again after 2 retries") {
		t.Errorf("no reason with the retries in the log:\n%s", c.stderr.String())
	}
}

// TestDelayedRetryQuorum: with a quorum claim.in and quorum delay queues
// (topology -queue-type quorum -retry-delays 1s), a claim that failed once
// comes back and is delivered once.
func TestDelayedRetryQuorum(t *testing.T) {
	h := newHarness(t)
	h.vh = brokertest.New(t) // a vhost of its own, with quorum queues
	if err := topo.DeclareFor(h.vh.Dial(t), topo.Quorum); err != nil {
		t.Fatal(err)
	}
	declareDelays(t, h, topo.Quorum, time.Second)
	flap := true
	h.partner.Set(claimsys.Control{Flap: &flap}) // 503, then 201
	h.vh.PublishClaims(t, brokertest.Claim("q-1", "C-q", "r.pdf"))
	c := h.runUntil("delivered", func() bool { return len(h.partner.Stats().Accepted) == 1 && h.drained() }, "--retry-delays", "1s")
	if n := h.calls("q-1"); n != 2 {
		t.Errorf("called %d times, want 2", n)
	}
	if !strings.Contains(c.stdout.String(), "1 delivered") || !strings.Contains(c.stdout.String(), "1 sent to delay queues") {
		t.Errorf("summary: %s", c.stdout.String())
	}
}

// TestDelayedRetryDoesNotFork is the fault row for the retry that forked in
// a soak: a claim's delayed copy is confirmed and recorded, and then the
// original's ack is lost with its connection (the hook closes the channel
// between the record and the ack, for each step, once). The redelivered
// original meets the record of its step and is acked without a call, so
// the claim keeps one lineage: called once per step (3 with two delays),
// one copy in claim.dead, and never a second copy in a delay queue.
func TestDelayedRetryDoesNotFork(t *testing.T) {
	h := newHarness(t)
	declareDelays(t, h, topo.Classic, time.Second, 2*time.Second)
	var mu sync.Mutex
	lost := map[int]bool{} // the steps whose ack the fault took
	h.hooks.BeforeAct = func(d amqp.Delivery, out claim.Outcome) {
		if out.Action != claim.Delay {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		step := retry.Done(d.Headers)
		if lost[step] {
			return
		}
		// The fault, held until it really happened: the channel is closed
		// before the ack of a delayed copy already confirmed and recorded.
		if ch := relay.ChannelOf(d); ch != nil && ch.Close() == nil {
			lost[step] = true
		}
	}
	h.vh.PublishClaims(t, brokertest.Claim("fork-1", "BUSY-fork", "r.pdf"))
	c := h.runUntil("dead-lettered", func() bool { return h.vh.Depth(t, topo.DeadQueue) == 1 && h.drained() },
		"--retry-delays", "1s,2s", "--json")
	mu.Lock()
	if len(lost) != 2 {
		t.Fatalf("the fault happened at %d step(s), want both (0 and 1): %v", len(lost), lost)
	}
	mu.Unlock()
	if n := h.calls("fork-1"); n != 3 {
		t.Errorf("called %d times, want 3: the first try and one after each delay", n)
	}
	var s relay.Summary
	if err := json.Unmarshal([]byte(c.stdout.String()), &s); err != nil {
		t.Fatalf("summary: %v: %s", err, c.stdout.String())
	}
	if s.Superseded != 2 || s.FailedTwice != 1 {
		t.Errorf("summary %+v: want the 2 redelivered originals acked as superseded, 1 dead-lettered", s)
	}
	if !strings.Contains(c.stdout.String(), `"superseded":2`) {
		t.Errorf("summary JSON: %s", c.stdout.String())
	}
	h.assertQueues(0, 0, 1)
	for _, q := range []string{"claim.retry.1s", "claim.retry.2s"} {
		if n := h.vh.Depth(t, q); n != 0 {
			t.Errorf("%s holds %d: a second lineage", q, n)
		}
	}
}

// TestForkedSiblingNotDeadTwice is the fault row for the last fork the
// soak found: a crash between a delayed copy's confirm and its record
// leaves two copies of the next step (here the last), each with a token of
// its own. The first is dead-lettered; the second, delivered while the
// first is held, waits for it. The hook closes the channel between the
// first's record and its reject, once both are delivered (a gate: it waits
// until rabbitmqctl shows two unacked in claim.in), so both come back
// redelivered. Only the dead-lettered copy is rejected again; its sibling
// is acked, so that claim.dead holds the claim once, after one call.
func TestForkedSiblingNotDeadTwice(t *testing.T) {
	h := newHarness(t)
	declareDelays(t, h, topo.Classic, time.Second)
	var mu sync.Mutex
	var faulted bool
	var gateErr error
	h.hooks.BeforeAct = func(d amqp.Delivery, out claim.Outcome) {
		mu.Lock()
		defer mu.Unlock()
		if out.Action != claim.DeadLetter || faulted || gateErr != nil {
			return
		}
		// The gate: the sibling is delivered to this consumer (unacked)
		// before the fault, or the fault would not be the one under test.
		deadline := time.Now().Add(20 * time.Second)
		for {
			rows, err := h.vh.Ctl.ListQueues(context.Background(), h.vh.Name)
			unacked := -1
			for _, r := range rows {
				if r.Name == topo.Queue {
					unacked = r.Unacked
				}
			}
			if err == nil && unacked == 2 {
				break
			}
			if time.Now().After(deadline) {
				gateErr = fmt.Errorf("the sibling was never delivered beside the dead-lettered copy (claim.in unacked %d, err %v)", unacked, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		if ch := relay.ChannelOf(d); ch != nil && ch.Close() == nil {
			faulted = true
		}
	}
	// What the crash leaves: two copies of step 1 in its delay queue.
	ch := h.vh.Channel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{"t1", "t2"} {
		dc, err := ch.PublishWithDeferredConfirm("", retry.QueueName(time.Second), true, false, amqp.Publishing{
			MessageId: "sib-1", ContentType: "application/json", DeliveryMode: amqp.Persistent,
			Headers: amqp.Table{retry.Header: int32(1), retry.TokenHeader: token},
			Body:    brokertest.Claim("sib-1", "BUSY-sib", "r.pdf"),
		})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish the copy %s: %v", token, err)
		}
	}
	c := h.runUntil("settled", func() bool {
		return h.drained() && h.vh.Depth(t, retry.QueueName(time.Second)) == 0 && h.vh.Depth(t, topo.DeadQueue) >= 1
	}, "--retry-delays", "1s", "--json")
	mu.Lock()
	if gateErr != nil || !faulted {
		t.Fatalf("the fault did not happen: %v", gateErr)
	}
	mu.Unlock()
	h.assertQueues(0, 0, 1)
	if n := h.calls("sib-1"); n != 1 {
		t.Errorf("called %d times, want 1: the sibling is never called", n)
	}
	dead := h.vh.Drain(t, topo.DeadQueue)
	if len(dead) != 1 {
		t.Fatalf("claim.dead holds %d copies, want 1:\n%s", len(dead), c.stderr.String())
	}
	if tok := dead[0].Headers[retry.TokenHeader]; tok != "t1" && tok != "t2" {
		t.Errorf("the dead copy's token %v", tok)
	}
}
