package relay_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/fail"
	"eaimq/internal/topo"
)

// TestOutcomes is the lab's whole story, each outcome path of the engine
// once: good claims delivered once, 422s dead-lettered after one call,
// BUSY claims (503) requeued once, called exactly twice and then
// dead-lettered; nothing left in claim.in, nothing unacked.
func TestOutcomes(t *testing.T) {
	w := newWorld(t)
	claims := brokertest.Claims("good", "C-good", 10, true)
	claims = append(claims, brokertest.Claims("nodocs", "C-nodocs", 3, false)...)
	claims = append(claims, brokertest.Claims("busy", "BUSY", 3, true)...)
	w.vh.PublishClaims(t, claims...)
	r := w.runUntil(w.config(), "10 delivered, 3 rejected, 3 busy twice", func() bool {
		return w.totalCalls() == 10+3+6 && w.vh.Depth(t, topo.DeadQueue) == 6
	})
	for _, g := range guids("good", 10) {
		if n := w.calls(g); n != 1 {
			t.Errorf("%s called %d times, want 1", g, n)
		}
	}
	for _, g := range guids("nodocs", 3) {
		if n := w.calls(g); n != 1 {
			t.Errorf("%s (422) called %d times, want 1", g, n)
		}
	}
	for _, g := range guids("busy", 3) {
		if n := w.calls(g); n != 2 {
			t.Errorf("%s (503) called %d times, want exactly 2", g, n)
		}
	}
	w.assertQueues(0, 0, 6)
	if s := r.summary(t); s.Delivered != 10 || s.Requeued != 3 || s.DeadLettered != 6 || s.Rejected != 3 || s.FailedTwice != 3 {
		t.Errorf("summary %+v: want 10 delivered, 3 requeued, 6 dead-lettered (3 rejected, 3 failed twice)", s)
	}
	for _, line := range []string{"outcome=delivered", "outcome=dead-lettered", "outcome=requeued", "claim_id=BUSY-000"} {
		if !strings.Contains(r.log.String(), line) {
			t.Errorf("log lacks %q", line)
		}
	}
}

// TestDuplicatesAcrossRuns: one guid published three times in one run is
// POSTed once; in the next run, on the same store, a fourth copy is acked
// without a call.
func TestDuplicatesAcrossRuns(t *testing.T) {
	w := newWorld(t)
	dup := brokertest.Claim("dup-1", "C-dup", "r.pdf")
	w.vh.PublishClaims(t, dup, dup, dup)
	r := w.runUntil(w.config(), "3 copies handled", w.drained)
	if s := r.summary(t); s.Delivered != 1 || s.Duplicates != 2 {
		t.Errorf("first run: %+v", s)
	}
	if n := w.calls("dup-1"); n != 1 {
		t.Fatalf("POSTed %d times, want 1", n)
	}
	w.vh.PublishClaims(t, dup)
	r2 := w.runUntil(w.config(), "the copy in the next run handled", w.drained)
	if n := w.calls("dup-1"); n != 1 {
		t.Errorf("in the next run: POSTed %d times, want 1", n)
	}
	if s := r2.summary(t); s.Duplicates != 1 {
		t.Errorf("next run: %+v", s)
	}
	w.assertQueues(0, 0, 0)
}

// TestConnectionClosed: the broker closes the relay's connection mid-run;
// it reconnects and finishes, and nothing is processed twice.
func TestConnectionClosed(t *testing.T) {
	w := newWorld(t)
	// The gate: after 5 claims the partner holds every call, so claims are
	// in flight and unacked when the broker closes the connection, however
	// fast the machine.
	five := 5
	w.partner.Set(claimsys.Control{HoldAfter: &five})
	t.Cleanup(w.partner.Release) // before the server's Close, which waits for held calls
	w.vh.PublishClaims(t, brokertest.Claims("rc", "C-rc", 30, true)...)
	r := w.start(w.config())
	brokertest.Eventually(t, 30*time.Second, "calls held at the partner", func() bool { return w.partner.Held() > 0 })
	closeConnections(t, w)
	brokertest.Eventually(t, 30*time.Second, "the relay saw the connection go", func() bool {
		return strings.Contains(r.log.String(), "connection lost")
	})
	w.partner.Release()
	brokertest.Eventually(t, 60*time.Second, "all 30 delivered after reconnect", func() bool {
		return len(w.partner.Stats().Accepted) == 30 && w.vh.Depth(t, topo.Queue) == 0
	})
	r.wait(t)
	if !strings.Contains(r.log.String(), "reconnected") {
		t.Errorf("no reconnect in the log:\n%s", r.log.String())
	}
	for g, n := range w.partner.Stats().Accepted {
		if n != 1 {
			t.Errorf("%s accepted %d times", g, n)
		}
	}
	w.assertQueues(0, 0, 0)
}

// TestUnexpectedInput: no message_id (falls back to the guid), no id at
// all, a body that is not JSON, and a 1 MiB body. No crash, no loop; each
// ends delivered or dead-lettered, with the reason on record.
func TestUnexpectedInput(t *testing.T) {
	w := newWorld(t)
	huge := []byte(`{"guid":"huge-1","claimId":"C-H","docs":["r.pdf"],"pad":"` + strings.Repeat("x", 1<<20) + `"}`)
	w.vh.Publish(t,
		amqp.Publishing{Body: brokertest.Claim("guid-only", "C-G", "r.pdf")},   // no message_id
		amqp.Publishing{Body: []byte(`{"claimId":"C-anon","docs":["r.pdf"]}`)}, // no id at all
		amqp.Publishing{MessageId: "plain-1", ContentType: "text/plain", Body: []byte("hello, not json")},
		amqp.Publishing{MessageId: "huge-1", Body: huge},
	)
	r := w.runUntil(w.config(), "all four handled", func() bool {
		return w.drained() && w.vh.Depth(t, topo.DeadQueue) == 2
	})
	if w.calls("guid-only") != 1 || w.calls("huge-1") != 1 {
		t.Errorf("calls: %v", w.partner.Stats().ByGuid)
	}
	if !brokertest.ContainsAll(r.log.String(), "no message_id and no guid", "message_id=guid-only") {
		t.Errorf("log:\n%s", r.log.String())
	}
	if rec := w.record("plain-1"); rec.State != "dead" || rec.LastStatus != 400 {
		t.Errorf("not-JSON claim record: %+v", rec)
	}
	w.assertQueues(0, 0, 2)
}

// TestTwoRelaysOneStore: two relays share one store and one queue; a guid
// published many times is POSTed once.
func TestTwoRelaysOneStore(t *testing.T) {
	w := newWorld(t)
	w.partner.Set(claimsysDelay(200))
	dup := brokertest.Claim("shared-1", "C-S", "r.pdf")
	w.vh.PublishClaims(t, dup, dup, dup, dup, dup, dup)
	a, b := w.start(w.config()), w.start(w.config())
	brokertest.Eventually(t, 30*time.Second, "all copies acked", w.drained)
	var wg sync.WaitGroup
	for _, r := range []*run{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); r.wait(t) }()
	}
	wg.Wait()
	if n := w.calls("shared-1"); n != 1 {
		t.Errorf("POSTed %d times by two relays, want 1", n)
	}
}

// TestSecondSignalEndsAtOnce: a stop (the first signal) waits for the
// calls in flight; the hard stop (the second) abandons them at once, as
// interrupted, and every unacked claim goes back to claim.in.
func TestSecondSignalEndsAtOnce(t *testing.T) {
	w := newWorld(t)
	w.partner.Set(claimsysDelay(3000))
	w.vh.PublishClaims(t, brokertest.Claims("sig", "C-sig", 5, true)...)
	r := w.start(w.config())
	brokertest.Eventually(t, 10*time.Second, "calls in flight", func() bool { return w.partner.Stats().MaxConcurrency >= 1 })
	r.stop()
	r.kill()
	select {
	case <-r.done:
	case <-time.After(2 * time.Second):
		t.Fatal("the hard stop did not end the run within 2s (the partner takes 3s)")
	}
	if fail.Of(r.err) != fail.Interrupted {
		t.Errorf("the run ended with %v, want interrupted", r.err)
	}
	brokertest.Eventually(t, 10*time.Second, "all five back in claim.in", func() bool {
		q := w.vh.Queues(t)[topo.Queue]
		return q.Messages == 5 && q.Unacked == 0
	})
}

// TestRefusesToDropClaims: claim.in without the dead-letter arguments, or
// eai.dlx missing, would make a 422 vanish; the relay refuses to start.
func TestRefusesToDropClaims(t *testing.T) {
	ctx := context.Background()
	t.Run("claim.in without DLX arguments", func(t *testing.T) {
		w := newWorld(t)
		w.vh = brokertest.New(t) // no topology
		if _, err := w.vh.Channel(t).QueueDeclare(topo.Queue, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		var out, log brokertest.Buffer
		err := runOnce(ctx, w.config(), &out, &log)
		if fail.Of(err) != fail.Config || !strings.Contains(err.Error(), "dropped") {
			t.Errorf("%v (class %v)", err, fail.Of(err))
		}
	})
	t.Run("eai.dlx missing", func(t *testing.T) {
		w := newWorld(t)
		if err := w.vh.Channel(t).ExchangeDelete(topo.DLX, false, false); err != nil {
			t.Fatal(err)
		}
		var out, log brokertest.Buffer
		err := runOnce(ctx, w.config(), &out, &log)
		if fail.Of(err) != fail.Config || !strings.Contains(err.Error(), "eai.dlx") {
			t.Errorf("%v (class %v)", err, fail.Of(err))
		}
	})
}
