package e2e

import (
	"fmt"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/retry"
	"eaimq/internal/topo"
)

// TestDelayQueueDepthMetrics: claims that wait for their retry in a delay
// queue (--retry-delays) are on /metrics, one series per delay queue, the
// number rabbitmqctl list_queues gives. Three claims the partner answers
// 503 sit in claim.retry.30s for 30 s: the scrape taken meanwhile must
// show them there, and claim.retry.2m at 0, while claim.in is empty. It
// is the case of the outage that no panel could see.
func TestDelayQueueDepthMetrics(t *testing.T) {
	t.Parallel()
	const delays, busy = "30s,2m", 3
	w, _ := retryWorld(t, delays)
	for i := range busy {
		w.publishFiles(brokertest.Claim(fmt.Sprintf("dd-busy-%d", i), fmt.Sprintf("BUSY-dd-%d", i), "r.pdf"))
	}
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := w.start("consumer", "--claim", w.url, "--max-seconds", "120", "--retry-delays", delays,
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
	series := func(queue string) string {
		return fmt.Sprintf(`eaimq_queue_messages_ready{queue=%q,vhost=%q}`, queue, w.vh.Name)
	}
	short, long := retry.QueueName(30*time.Second), retry.QueueName(2*time.Minute)
	var scrape string
	brokertest.Eventually(t, 25*time.Second, "the delayed claims on /metrics", func() bool {
		if p.exited() {
			t.Fatalf("consumer exited: %s", p.errb.String())
		}
		scrape = httpGet(t, base+"/metrics")
		return metric(scrape, series(short)) == busy
	})
	// Read while the copies still wait: the first leaves claim.retry.30s
	// 30 s after it came, and the scrape above came well within that.
	q := w.vh.Queues(t)
	if q[short].Messages != busy || q[topo.Queue].Messages != 0 {
		t.Errorf("rabbitmqctl: %s %d, %s %d; want %d and 0 (the test was too slow?)",
			short, q[short].Messages, topo.Queue, q[topo.Queue].Messages, busy)
	}
	for s, want := range map[string]float64{series(long): 0, series(topo.Queue): 0, series(topo.DeadQueue): 0} {
		if got := metric(scrape, s); got != want {
			t.Errorf("%s = %v, want %v", s, got, want)
		}
	}
	p.stop(t)
}
