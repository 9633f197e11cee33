package relay_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/fail"
)

// swallowAfter stands between the first session's consumer and the relay
// (Hooks.Deliveries): it passes n deliveries on, then keeps the rest from
// the relay, unacked at the broker. That is what the relay sees on a node
// cut off from claim.in's leader: the connection stays up and nothing
// more arrives, while claim.in says it holds ready claims.
func swallowAfter(n int, swallowed *atomic.Int32) func(<-chan amqp.Delivery) <-chan amqp.Delivery {
	return func(in <-chan amqp.Delivery) <-chan amqp.Delivery {
		out := make(chan amqp.Delivery)
		go func() {
			defer close(out)
			passed := 0
			for d := range in {
				if passed == n {
					swallowed.Add(1)
					continue
				}
				passed++
				out <- d
			}
		}()
		return out
	}
}

// TestStallGivesTheSessionUp: with --stall-after 2s, a session that gets
// no delivery for 2 s while a prefetch slot is free and claim.in holds
// ready claims is given up; its connection's close gives the swallowed
// deliveries back, the next session takes every claim, each is called
// once. The gate: the stall is asserted to have happened (deliveries held
// back from the relay, the log line) before the claims are counted.
func TestStallGivesTheSessionUp(t *testing.T) {
	const claims, passed = 20, 3
	w := newWorld(t)
	cfg := w.config()
	cfg.StallAfter = 2 * time.Second
	var swallowed atomic.Int32
	cfg.Hooks.Deliveries = swallowAfter(passed, &swallowed)
	w.vh.PublishClaims(t, brokertest.Claims("stall", "C-stall", claims, true)...)
	start := time.Now()
	r := w.start(cfg)
	brokertest.Eventually(t, 30*time.Second, "the session given up as stalled", func() bool {
		return strings.Contains(r.log.String(), "session stalled")
	})
	took := time.Since(start)
	if swallowed.Load() == 0 {
		t.Fatalf("no delivery was held back from the relay: the stall was not the one made here\n%s", r.log.String())
	}
	// The bound the manual states: d plus a quarter of d (at least 1 s),
	// here 3 s, and slack for a loaded machine.
	if took > 3*time.Second+5*time.Second {
		t.Errorf("stall noticed after %s with --stall-after 2s", took)
	}
	brokertest.Eventually(t, 30*time.Second, "every claim delivered after the stall", func() bool {
		return len(w.partner.Stats().Accepted) == claims && w.drained()
	})
	r.wait(t)
	for id, n := range w.partner.Stats().ByGuid {
		if n != 1 {
			t.Errorf("%s called %d times, want 1", id, n)
		}
	}
	if !strings.Contains(r.log.String(), "msg=reconnected") {
		t.Errorf("no new session after the stall:\n%s", r.log.String())
	}
	w.assertQueues(0, 0, 0)
}

// TestStallNotOnAnIdleQueue: with --stall-after 2s, a consumer whose
// claim.in is empty gets no delivery for far longer than 2 s, and keeps
// its session: no ready claim, no stall.
func TestStallNotOnAnIdleQueue(t *testing.T) {
	w := newWorld(t)
	cfg := w.config()
	cfg.StallAfter = 2 * time.Second
	w.vh.PublishClaims(t, brokertest.Claims("idle", "C-idle", 3, true)...)
	r := w.start(cfg)
	brokertest.Eventually(t, 30*time.Second, "the claims delivered", func() bool {
		return len(w.partner.Stats().Accepted) == 3 && w.drained()
	})
	// Idle for three periods and the ticks between them: a watch that
	// ignored claim.in's depth would have fired by now.
	time.Sleep(3*2*time.Second + 2*time.Second)
	r.wait(t)
	if strings.Contains(r.log.String(), "session stalled") || strings.Contains(r.log.String(), "msg=reconnected") {
		t.Errorf("an idle session was given up:\n%s", r.log.String())
	}
}

// cutOffWrites stands between the relay and the broker the way a node
// cut off from its cluster's majority under Khepri behaves, from the
// client's side: from the relay's first basic.ack on, its acks go nowhere
// and a queue's creation (a non-passive queue.declare: a write to the
// metadata store) is never answered, while passive declares, deliveries
// already sent and heartbeats go on. cut and writes count what it kept
// from the broker.
func cutOffWrites(t *testing.T, url string, cut, writes *atomic.Int32) string {
	return brokertest.FilterClient(t, url, func(f brokertest.Frame) bool {
		switch class, method := f.Method(); {
		case class == 60 && method == 80: // basic.ack
			cut.Add(1)
			return true
		case class == 50 && method == 10 && cut.Load() > 0: // queue.declare
			// reserved short, queue name (shortstr), then the bits:
			// passive is the lowest.
			p := f.Payload[4:]
			if n := int(p[2]); len(p) > 3+n && p[3+n]&1 == 0 {
				writes.Add(1)
				return true
			}
		}
		return false
	})
}

// TestStallWhenTheNodeCannotWrite: the consumer's node is cut off after
// it took every claim (prefetch 5, 5 claims), so claim.in shows no ready
// claim and its depth says nothing; the node answers passive declares but
// makes no queue. With --stall-after 2s the session is given up once a
// queue's creation goes unanswered for the period; the next address takes
// the claims back (their acks never arrived) and meets their records:
// each is called once. The gate: the acks and the probe's declaration
// were really kept from the broker.
func TestStallWhenTheNodeCannotWrite(t *testing.T) {
	const claims = 5
	w := newWorld(t)
	cfg := w.config()
	cfg.StallAfter = 2 * time.Second
	var cut, writes atomic.Int32
	cfg.URL = cutOffWrites(t, w.vh.URL, &cut, &writes) + "," + w.vh.URL
	w.vh.PublishClaims(t, brokertest.Claims("cutoff", "C-cut", claims, true)...)
	start := time.Now()
	r := w.start(cfg)
	brokertest.Eventually(t, 30*time.Second, "the session given up as stalled", func() bool {
		return strings.Contains(r.log.String(), "session stalled")
	})
	took := time.Since(start)
	if cut.Load() == 0 || writes.Load() == 0 {
		t.Fatalf("acks kept %d, declarations kept %d: the cut was not the one made here\n%s", cut.Load(), writes.Load(), r.log.String())
	}
	if !strings.Contains(r.log.String(), "did not answer a queue declaration") {
		t.Errorf("the stall is not the unanswered declaration:\n%s", r.log.String())
	}
	// The bound the manual states: d, a tick (a quarter of d, at least
	// 1 s) and half of d (at least 1 s) for the answer: 4 s here, and
	// slack for a loaded machine.
	if took > 4*time.Second+5*time.Second {
		t.Errorf("stall noticed after %s with --stall-after 2s", took)
	}
	brokertest.Eventually(t, 30*time.Second, "the claims settled on the next address", func() bool {
		return strings.Contains(r.log.String(), "msg=reconnected") && w.drained()
	})
	r.wait(t)
	for id, n := range w.partner.Stats().ByGuid {
		if n != 1 {
			t.Errorf("%s called %d times, want 1", id, n)
		}
	}
	if got := len(w.partner.Stats().Accepted); got != claims {
		t.Errorf("%d claims accepted, want %d", got, claims)
	}
	w.assertQueues(0, 0, 0)
}

// TestSessionOpeningIsBounded: a node that takes the connection and then
// answers nothing on a channel (its heartbeats go on) does not hold the
// consumer: the session's opening gives up after the dial's timeout (10 s)
// and the run exits 69 saying so, rather than waiting for ever.
func TestSessionOpeningIsBounded(t *testing.T) {
	w := newWorld(t)
	cfg := w.config()
	url, stalled := brokertest.StallAfterHandshake(t, w.vh.URL)
	cfg.URL = url
	start := time.Now()
	r := w.start(cfg)
	select {
	case <-r.done:
	case <-time.After(40 * time.Second):
		t.Fatalf("the relay still opening its session 40 s after it started:\n%s", r.log.String())
	}
	select {
	case <-stalled:
	default:
		t.Fatalf("no frame was kept from the broker: the stall did not happen (%v)", r.err)
	}
	if fail.Of(r.err) != fail.Unavailable || !strings.Contains(fmt.Sprint(r.err), "did not open the session within 10s") {
		t.Errorf("run ended with %v after %s; want unavailable, naming the stall", r.err, time.Since(start))
	}
}
