package relay_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/claim"
	"eaimq/internal/relay"
	"eaimq/internal/retry"
	"eaimq/internal/topo"
)

// TestStaleDeliveryDropped is the model checker's first finding
// (docs/model.md): a worker whose channel closed before its Begin drops
// its delivery. A BUSY claim's first copy is held in its worker before
// Begin; the test closes that channel, so the broker requeues the copy;
// the relay's next session takes it redelivered and settles it: in the
// lab's mode requeued (its first failure), then dead-lettered at its
// second call; with --retry-delays a delayed copy. Only then is the held
// worker released. Going on, it would Begin with its own copy, fresh at
// step 0, which Begin takes for a claim published again: one call more,
// and with delays a second lineage. Dropped, it makes no call, and the
// log says why.
func TestStaleDeliveryDropped(t *testing.T) {
	for _, tc := range []struct {
		name     string
		delays   bool
		calls    int         // the redelivered copies' calls
		state    claim.State // on record after them
		dead     int         // in claim.dead at the end
		delayed  int         // in the delay queue at the end
		sumCheck func(relay.Summary) bool
	}{
		{"lab", false, 2, claim.StateDead, 1, 0, func(s relay.Summary) bool {
			return s.Received == 3 && s.Requeued == 1 && s.DeadLettered == 1 && s.FailedTwice == 1 && s.Delayed == 0
		}},
		{"retry-delays", true, 1, claim.StateFailed, 0, 1, func(s relay.Summary) bool {
			return s.Received == 2 && s.Requeued == 0 && s.DeadLettered == 0 && s.Delayed == 1
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			cfg := w.config()
			delayQueue := ""
			if tc.delays {
				w.withDelays(&cfg, topo.Classic, time.Minute) // the copy waits there until the test is over
				delayQueue = retry.QueueName(time.Minute)
			}
			held, release := make(chan amqp.Delivery, 1), make(chan struct{})
			var once atomic.Bool
			cfg.Hooks.BeforeBegin = func(d amqp.Delivery) {
				if !d.Redelivered && once.CompareAndSwap(false, true) {
					held <- d
					<-release
				}
			}
			w.vh.PublishClaims(t, brokertest.Claim("stale-1", "BUSY-stale", "r.pdf"))
			r := w.start(cfg)

			var d amqp.Delivery
			select {
			case d = <-held:
			case <-time.After(30 * time.Second):
				t.Fatalf("the first copy never reached its Begin:\n%s", r.log.String())
			}
			if err := relay.ChannelOf(d).Close(); err != nil {
				t.Fatal(err)
			}
			// The gate: the broker has really given the copy back, and the
			// next session has called with its redelivered copies and
			// settled them, while the first worker still waits.
			brokertest.Eventually(t, 30*time.Second, "the redelivered copies called and settled", func() bool {
				if w.calls("stale-1") != tc.calls || !w.drained() {
					return false
				}
				if tc.delays {
					return w.vh.Depth(t, delayQueue) == 1
				}
				return w.vh.Depth(t, topo.DeadQueue) == 1
			})
			close(release)
			// The first worker has decided once it dropped its copy (the
			// fix) or called again (without it).
			brokertest.Eventually(t, 30*time.Second, "the held worker done", func() bool {
				return strings.Contains(r.log.String(), "delivery dropped before its Begin") || w.calls("stale-1") > tc.calls
			})
			r.wait(t)

			if n := w.calls("stale-1"); n != tc.calls {
				t.Errorf("called %d times, want %d: the worker whose channel closed went on\n%s", n, tc.calls, r.log.String())
			}
			if !strings.Contains(r.log.String(), "delivery dropped before its Begin") {
				t.Errorf("no line says the stale copy was dropped:\n%s", r.log.String())
			}
			rec := w.record("stale-1")
			if rec.Attempts != tc.calls || rec.State != tc.state {
				t.Errorf("record: %d attempts, state %v; want %d, %v (the redelivered copies')", rec.Attempts, rec.State, tc.calls, tc.state)
			}
			s := r.summary(t)
			if s.Errors != 0 || !tc.sumCheck(s) {
				t.Errorf("summary %+v: want the stale copy received and dropped (not settled), no errors, the redelivered copies' outcomes alone", s)
			}
			if tc.delays {
				if n := w.vh.Depth(t, delayQueue); n != tc.delayed {
					t.Errorf("%s holds %d copies, want %d: one lineage", delayQueue, n, tc.delayed)
				}
			}
			w.assertQueues(0, 0, tc.dead)
		})
	}
}
