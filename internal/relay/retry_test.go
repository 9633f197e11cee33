package relay_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/claim"
	"eaimq/internal/claimsys"
	"eaimq/internal/relay"
	"eaimq/internal/retry"
	"eaimq/internal/topo"
)

// TestDelayedRetriesThenDLQ: a claim that keeps failing is tried once and
// once after each delay, then dead-lettered with its history in the
// headers and "after 2 retries" on record; never requeued.
func TestDelayedRetriesThenDLQ(t *testing.T) {
	w := newWorld(t)
	cfg := w.config()
	w.withDelays(&cfg, topo.Classic, time.Second, 2*time.Second)
	w.vh.PublishClaims(t, brokertest.Claim("dl-busy", "BUSY-dl", "r.pdf"))
	start := time.Now()
	r := w.runUntil(cfg, "dead-lettered", func() bool { return w.vh.Depth(t, topo.DeadQueue) == 1 })
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("dead-lettered after %s: sooner than its delays (1s + 2s)", took)
	}
	if n := w.calls("dl-busy"); n != 3 {
		t.Errorf("called %d times, want 3 (the first try and 2 retries)", n)
	}
	if s := r.summary(t); s.Delayed != 2 || s.FailedTwice != 1 || s.Requeued != 0 {
		t.Errorf("summary %+v", s)
	}
	dead := w.vh.Drain(t, topo.DeadQueue)
	if len(dead) != 1 {
		t.Fatalf("%d in claim.dead", len(dead))
	}
	hist, _ := dead[0].Headers[retry.HistoryHeader].([]any)
	if dead[0].Headers[retry.Header] != int32(2) || len(hist) != 2 || !strings.Contains(hist[1].(string), "503 -> claim.retry.2s") {
		t.Errorf("headers %v", dead[0].Headers)
	}
	if !strings.Contains(r.log.String(), "transient failure again after 2 retries") {
		t.Errorf("no reason with the retries in the log:\n%s", r.log.String())
	}
}

// TestDelayedRetryQuorum: with a quorum claim.in and quorum delay queues
// (topology -queue-type quorum -retry-delays 1s), a claim that failed once
// comes back and is delivered once.
func TestDelayedRetryQuorum(t *testing.T) {
	w := newWorld(t)
	w.vh = brokertest.New(t) // a vhost of its own, with quorum queues
	if err := topo.DeclareFor(w.vh.Dial(t), topo.Quorum); err != nil {
		t.Fatal(err)
	}
	cfg := w.config()
	w.withDelays(&cfg, topo.Quorum, time.Second)
	flap := true
	w.partner.Set(claimsys.Control{Flap: &flap}) // 503, then 201
	w.vh.PublishClaims(t, brokertest.Claim("q-1", "C-q", "r.pdf"))
	r := w.runUntil(cfg, "delivered", func() bool { return len(w.partner.Stats().Accepted) == 1 && w.drained() })
	if n := w.calls("q-1"); n != 2 {
		t.Errorf("called %d times, want 2", n)
	}
	if s := r.summary(t); s.Delivered != 1 || s.Delayed != 1 {
		t.Errorf("summary: %+v", s)
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
	w := newWorld(t)
	cfg := w.config()
	w.withDelays(&cfg, topo.Classic, time.Second, 2*time.Second)
	var mu sync.Mutex
	lost := map[int]bool{} // the steps whose ack the fault took
	cfg.Hooks.BeforeAct = func(d amqp.Delivery, out claim.Outcome) {
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
	w.vh.PublishClaims(t, brokertest.Claim("fork-1", "BUSY-fork", "r.pdf"))
	r := w.runUntil(cfg, "dead-lettered", func() bool { return w.vh.Depth(t, topo.DeadQueue) == 1 && w.drained() })
	mu.Lock()
	if len(lost) != 2 {
		t.Fatalf("the fault happened at %d step(s), want both (0 and 1): %v", len(lost), lost)
	}
	mu.Unlock()
	if n := w.calls("fork-1"); n != 3 {
		t.Errorf("called %d times, want 3: the first try and one after each delay", n)
	}
	if s := r.summary(t); s.Superseded != 2 || s.FailedTwice != 1 {
		t.Errorf("summary %+v: want the 2 redelivered originals acked as superseded, 1 dead-lettered", s)
	}
	w.assertQueues(0, 0, 1)
	for _, q := range []string{"claim.retry.1s", "claim.retry.2s"} {
		if n := w.vh.Depth(t, q); n != 0 {
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
	w := newWorld(t)
	cfg := w.config()
	w.withDelays(&cfg, topo.Classic, time.Second)
	var mu sync.Mutex
	var faulted bool
	var gateErr error
	cfg.Hooks.BeforeAct = func(d amqp.Delivery, out claim.Outcome) {
		mu.Lock()
		defer mu.Unlock()
		if out.Action != claim.DeadLetter || faulted || gateErr != nil {
			return
		}
		// The gate: the sibling is delivered to this consumer (unacked)
		// before the fault, or the fault would not be the one under test.
		deadline := time.Now().Add(20 * time.Second)
		for {
			rows, err := w.vh.Ctl.ListQueues(context.Background(), w.vh.Name)
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
	ch := w.vh.Channel(t)
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
	r := w.runUntil(cfg, "settled", func() bool {
		return w.drained() && w.vh.Depth(t, retry.QueueName(time.Second)) == 0 && w.vh.Depth(t, topo.DeadQueue) >= 1
	})
	mu.Lock()
	if gateErr != nil || !faulted {
		t.Fatalf("the fault did not happen: %v", gateErr)
	}
	mu.Unlock()
	w.assertQueues(0, 0, 1)
	if n := w.calls("sib-1"); n != 1 {
		t.Errorf("called %d times, want 1: the sibling is never called", n)
	}
	dead := w.vh.Drain(t, topo.DeadQueue)
	if len(dead) != 1 {
		t.Fatalf("claim.dead holds %d copies, want 1:\n%s", len(dead), r.log.String())
	}
	if tok := dead[0].Headers[retry.TokenHeader]; tok != "t1" && tok != "t2" {
		t.Errorf("the dead copy's token %v", tok)
	}
}
