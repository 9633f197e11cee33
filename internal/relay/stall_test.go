package relay_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
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
