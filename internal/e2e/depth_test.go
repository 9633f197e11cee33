package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/topo"
)

// gatedPartner holds every call until open is closed, then hands it to h.
type gatedPartner struct {
	open chan struct{}
	h    http.Handler
}

func (g gatedPartner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case <-g.open:
		g.h.ServeHTTP(w, r)
	case <-r.Context().Done():
	}
}

// TestQueueMetrics: the consumer's /metrics shows the depth of claim.in
// and claim.dead and the deliveries it holds unacked, the numbers
// rabbitmqctl list_queues gives (what the grader and an operator read),
// with the partner holding every call; after the broker closes the
// connection, the reconnect is counted and the depths are shown again
// from the new session; and they follow the queues as the claims drain.
//
// (Unacked is what the consumer has taken off its channel. Right after a
// reconnect, while the workers still wait on the old connection's calls,
// the broker has sent the new channel up to --prefetch more than that:
// they wait in the client library's buffer, which the count cannot see.
// So after the reconnect only the depths are compared.)
func TestQueueMetrics(t *testing.T) {
	t.Parallel()
	const prefetch, claims, dead = 3, 10, 2
	w := newWorld(t)
	gate := gatedPartner{open: make(chan struct{}), h: w.partner}
	srv := httptest.NewServer(gate)
	t.Cleanup(srv.Close)
	ch := w.vh.Channel(t)
	for i := range dead {
		if err := ch.Publish("", topo.DeadQueue, false, false, amqp.Publishing{MessageId: fmt.Sprintf("old-dead-%d", i), Body: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	w.publishFiles(brokertest.Claims("depth", "C-depth", claims, true)...)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := w.start("consumer", "--claim", srv.URL, "--max-seconds", "120", "--prefetch", fmt.Sprint(prefetch),
		"--http-timeout", "2m", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
	series := func(name, queue string) string {
		return fmt.Sprintf(`%s{queue=%q,vhost=%q}`, name, queue, w.vh.Name)
	}
	want := func(what string, in, unacked, deadN float64) {
		t.Helper()
		brokertest.Eventually(t, 30*time.Second, what, func() bool {
			if p.exited() {
				t.Fatalf("consumer exited: %s", p.errb.String())
			}
			m := httpGet(t, base+"/metrics")
			return metric(m, series("eaimq_queue_messages_ready", topo.Queue)) == in &&
				(unacked < 0 || metric(m, series("eaimq_queue_messages_unacked", topo.Queue)) == unacked) &&
				metric(m, series("eaimq_queue_messages_ready", topo.DeadQueue)) == deadN
		})
		if unacked < 0 {
			return
		}
		// rabbitmqctl's messages column is ready and unacked together.
		q := w.vh.Queues(t)
		in2, un2 := q[topo.Queue].Messages-q[topo.Queue].Unacked, q[topo.Queue].Unacked
		if float64(in2) != in || float64(un2) != unacked || float64(q[topo.DeadQueue].Messages) != deadN {
			t.Errorf("%s: rabbitmqctl says claim.in %d ready %d unacked, claim.dead %d; the metrics said %v, %v, %v",
				what, in2, un2, q[topo.DeadQueue].Messages, in, unacked, deadN)
		}
	}
	want("the partner holds the first calls", claims-prefetch, prefetch, dead)
	if m := httpGet(t, base+"/metrics"); metric(m, "eaimq_broker_reconnects_total") != 0 {
		t.Errorf("reconnects before any: %v", metric(m, "eaimq_broker_reconnects_total"))
	}
	closeConnections(t, w.vh)
	brokertest.Eventually(t, 30*time.Second, "the reconnect counted", func() bool {
		return metric(httpGet(t, base+"/metrics"), "eaimq_broker_reconnects_total") == 1
	})
	want("after the reconnect", claims-prefetch, -1, dead)
	close(gate.open)
	want("drained", 0, 0, dead)
	p.stop(t)
}
