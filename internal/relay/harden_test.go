package relay_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/claim"
	"eaimq/internal/fail"
	"eaimq/internal/relay"
	"eaimq/internal/topo"
)

// TestDeadQueueDeletedMidRun: claim.dead deleted by hand while the relay
// runs. A 422 must not be rejected into nothing: the run stops (a config
// failure naming topology), the claim stays in claim.in; after topology,
// the next run dead-letters it without calling the partner again.
func TestDeadQueueDeletedMidRun(t *testing.T) {
	w := newWorld(t)
	w.vh.PublishClaims(t, brokertest.Claim("first-ok", "C-0", "r.pdf"))
	cfg := w.config()
	cfg.MaxRun = time.Minute
	r := w.start(cfg)
	brokertest.Eventually(t, 30*time.Second, "the first claim delivered", func() bool { return w.drained() && w.calls("first-ok") == 1 })
	if _, err := w.vh.Channel(t).QueueDelete(topo.DeadQueue, false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.vh.Queues(t)[topo.DeadQueue]; ok {
		t.Fatal("claim.dead still exists")
	}
	w.vh.PublishClaims(t, brokertest.Claim("nodocs-x", "C-X"))
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay went on with no dead-letter route")
	}
	if fail.Of(r.err) != fail.Config || !strings.Contains(r.err.Error(), "run topology") {
		t.Fatalf("the run ended with %v, want a config failure naming topology:\n%s", r.err, r.log.String())
	}
	if q := w.vh.Queues(t)[topo.Queue]; q.Messages != 1 {
		t.Fatalf("the rejected claim is not back in claim.in: %+v", q)
	}
	// At start, the missing route is refused too, with no summary.
	var out, log brokertest.Buffer
	err := runOnce(context.Background(), cfg, &out, &log)
	if fail.Of(err) != fail.Config || !strings.Contains(err.Error(), "claim.dead") || out.String() != "" {
		t.Fatalf("start without claim.dead: %v, stdout %q", err, out.String())
	}
	w.vh.Topology(t)
	w.runUntil(w.config(), "dead-lettered after topology", func() bool { return w.drained() && w.vh.Depth(t, topo.DeadQueue) == 1 })
	if n := w.calls("nodocs-x"); n != 1 {
		t.Errorf("the 422 claim was called %d times, want 1 (its decision was on record)", n)
	}
}

// TestLostRejectIsNotCalledAgain: the connection goes between the record
// of a dead-letter decision and the reject. The redelivered copy meets the
// decision and is rejected again without a call: a 422 claim is called
// once, a BUSY claim twice, never three times.
func TestLostRejectIsNotCalledAgain(t *testing.T) {
	w := newWorld(t)
	cfg := w.config()
	var mu sync.Mutex
	closed := map[string]bool{}
	var lost atomic.Int32
	cfg.Hooks.BeforeAct = func(d amqp.Delivery, out claim.Outcome) {
		if out.Action != claim.DeadLetter {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if closed[d.MessageId] {
			return
		}
		closed[d.MessageId] = true
		// The fault: the channel dies before the reject goes out.
		if ch := relay.ChannelOf(d); ch != nil {
			ch.Close()
			lost.Add(1)
		}
	}
	w.vh.PublishClaims(t, brokertest.Claim("nd-1", "C-1"), brokertest.Claim("bz-1", "BUSY-1", "r.pdf"))
	r := w.runUntil(cfg, "both dead-lettered", func() bool { return w.drained() && w.vh.Depth(t, topo.DeadQueue) == 2 })
	if lost.Load() != 2 {
		t.Fatalf("the fault happened %d times, want 2", lost.Load())
	}
	if n := w.calls("nd-1"); n != 1 {
		t.Errorf("the 422 claim was called %d times, want 1", n)
	}
	if n := w.calls("bz-1"); n != 2 {
		t.Errorf("the BUSY claim was called %d times, want 2", n)
	}
	if !strings.Contains(r.log.String(), "rejected again without a call") {
		t.Errorf("log:\n%s", r.log.String())
	}
}

// TestAnswerInHandIsRecordedOnForcedExit: the hard stop arrives after the
// partner answered 201 and before the record. The answer is recorded
// anyway (the run ends as interrupted, the claim unacked), so the
// redelivered copy is acked as a duplicate, never sent again.
func TestAnswerInHandIsRecordedOnForcedExit(t *testing.T) {
	w := newWorld(t)
	w.vh.PublishClaims(t, brokertest.Claim("inhand-1", "C-1", "r.pdf"))
	cfg := w.config()
	cfg.MaxRun = time.Minute
	var r *run
	var fired atomic.Bool
	started := make(chan struct{})
	cfg.Hooks.AfterAnswer = func(out claim.Outcome) {
		if out == claim.OutDelivered && fired.CompareAndSwap(false, true) {
			<-started
			r.stop()
			r.kill() // the second signal, with the 201 in hand
		}
	}
	r = w.start(cfg)
	close(started)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("no forced exit")
	}
	if !fired.Load() || fail.Of(r.err) != fail.Interrupted {
		t.Fatalf("fired %v, the run ended with %v", fired.Load(), r.err)
	}
	if rec := w.record("inhand-1"); !rec.Delivered() {
		t.Fatalf("the 201 in hand was thrown away: %+v", rec)
	}
	w.runUntil(w.config(), "the copy acked as a duplicate", w.drained)
	if n := w.calls("inhand-1"); n != 1 {
		t.Errorf("called %d times, want 1", n)
	}
}

// TestWaitingCopyDoesNotCallAfterDeadline: two copies of a BUSY claim; the
// second waits behind the first's call, which outlives the run's end
// (MaxRun). When the first fails, the second must not start a call after
// the deadline.
func TestWaitingCopyDoesNotCallAfterDeadline(t *testing.T) {
	w := newWorld(t)
	w.partner.Set(claimsysDelay(1500))
	busy := brokertest.Claim("wait-1", "BUSY-1", "r.pdf")
	w.vh.PublishClaims(t, busy, busy)
	cfg := w.config()
	cfg.MaxRun = 500 * time.Millisecond
	var out, log brokertest.Buffer
	start := time.Now()
	if err := runOnce(context.Background(), cfg, &out, &log); err != nil {
		t.Fatalf("%v:\n%s", err, log.String())
	}
	if n := w.calls("wait-1"); n != 1 {
		t.Errorf("%d calls in a run of 0.5 s whose first call took 1.5 s, want 1 (took %s)", n, time.Since(start))
	}
}

// TestUnsendable: a message_id or content type that cannot be an HTTP
// header value is dead-lettered at once with its own reason: no call, no
// retry burned.
func TestUnsendable(t *testing.T) {
	w := newWorld(t)
	w.vh.Publish(t,
		amqp.Publishing{MessageId: "nl\nid", Body: brokertest.Claim("x1", "C-1", "r.pdf")},
		amqp.Publishing{MessageId: "bel\aid", Body: brokertest.Claim("x2", "C-2", "r.pdf")},
		amqp.Publishing{MessageId: "ct-1", ContentType: "application/json\r\nX-Evil: 1", Body: brokertest.Claim("ct-1", "C-3", "r.pdf")},
	)
	r := w.runUntil(w.config(), "three dead-lettered", func() bool { return w.drained() && w.vh.Depth(t, topo.DeadQueue) == 3 })
	if n := w.totalCalls(); n != 0 {
		t.Errorf("the partner was called %d times", n)
	}
	if rec := w.record("ct-1"); rec.Outcome != claim.OutUnsendable || rec.Attempts != 0 || !strings.Contains(rec.DeadReason, "content_type") {
		t.Errorf("record: %+v", rec)
	}
	if s := r.summary(t); s.Unsendable != 3 {
		t.Errorf("summary: %+v", s)
	}
}

// TestGuidIsExact: without a message_id the relay keys on the body's
// exact-case "guid", byte-exact (the rule publish applies): "GUID" is not
// a guid.
func TestGuidIsExact(t *testing.T) {
	w := newWorld(t)
	w.vh.Publish(t,
		amqp.Publishing{Body: []byte(`{"GUID":"upper-1","claimId":"C-U","docs":["r.pdf"]}`)},
		amqp.Publishing{Body: []byte(`{"guid":"exact-1","claimId":"C-E","docs":["r.pdf"]}`)},
	)
	w.runUntil(w.config(), "settled", func() bool { return w.drained() && w.totalCalls() == 1 && w.vh.Depth(t, topo.DeadQueue) == 1 })
	if n := w.calls("exact-1"); n != 1 {
		t.Errorf("exact guid: %d calls", n)
	}
	if rec := w.record("upper-1"); rec.State != "" {
		t.Errorf("GUID was taken as the guid: %+v", rec)
	}
}
