package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/topo"
)

// downPartner is a claim system that is down: each call gets no answer
// (the connection is closed unanswered), and only when the test lets one
// go, so that the test sees the consumer between two failures. up hands
// the calls to a working claim system instead.
type downPartner struct {
	release chan struct{} // one receive per call let go; closed: all
	up      atomic.Bool
	partner *claimsys.Server
}

func (p *downPartner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.up.Load() {
		p.partner.ServeHTTP(w, r)
		return
	}
	select {
	case <-p.release:
	case <-r.Context().Done():
		return
	}
	if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
		conn.Close() // no answer: what a refused or reset call is to the consumer
	}
}

// TestFaultPartnerDownUnready: with the lab's default flags (and
// --metrics-addr, for /readyz), the claim system gives no answer. /readyz
// stays 200 for the first K-1 failures in a row and is 503, naming them,
// at the K-th (K = --unready-after's default, 5), although the consumer
// does not pause: it goes on dead-lettering claims under the lab's rule,
// and eaimq_ready says 0. When the claim system answers again, the first
// call that does not fail makes it ready.
func TestFaultPartnerDownUnready(t *testing.T) {
	t.Parallel()
	const k = 5
	w := newWorld(t)
	down := &downPartner{release: make(chan struct{}), partner: w.partner}
	srv := httptest.NewServer(down)
	t.Cleanup(srv.Close)
	published := w.publishFiles(brokertest.Claims("unready", "C-unready", 4, true)...)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := w.start("consumer", "--claim", srv.URL, "--max-seconds", "120", "--prefetch", "1", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
	brokertest.Eventually(t, 30*time.Second, "ready", func() bool {
		if p.exited() {
			t.Fatalf("consumer exited: %s", p.errb.String())
		}
		return strings.HasPrefix(httpGet(t, base+"/readyz"), "200")
	})
	for i := 1; i <= k; i++ {
		down.release <- struct{}{} // the i-th call: no answer
		brokertest.Eventually(t, 30*time.Second, fmt.Sprintf("%d failures in a row", i), func() bool {
			return metric(httpGet(t, base+"/metrics"), "eaimq_partner_consecutive_failures") == float64(i)
		})
		ready := httpGet(t, base+"/readyz")
		switch {
		case i < k && !strings.HasPrefix(ready, "200"):
			t.Errorf("after %d failures in a row: %s, want 200 until %d", i, ready, k)
		case i == k && (!strings.HasPrefix(ready, "503") || !strings.Contains(ready, fmt.Sprintf("failed the last %d calls in a row", k))):
			t.Errorf("after %d failures in a row: %s, want 503 naming them", i, ready)
		}
	}
	if m := httpGet(t, base+"/metrics"); metric(m, "eaimq_ready") != 0 || metric(m, "eaimq_paused") != 0 {
		t.Errorf("eaimq_ready %v, eaimq_paused %v; want 0 and 0 (not ready, not paused)", metric(m, "eaimq_ready"), metric(m, "eaimq_paused"))
	}
	close(down.release) // the rest fail at once: every claim dead-lettered after its two calls
	brokertest.Eventually(t, 60*time.Second, "every claim dead-lettered", func() bool {
		return w.vh.Queues(t)[topo.DeadQueue].Messages == len(published)
	})
	if r := httpGet(t, base+"/readyz"); !strings.HasPrefix(r, "503") || !strings.Contains(r, "failed the last 8 calls") {
		t.Errorf("/readyz after 8 failures: %s", r)
	}
	down.up.Store(true)
	published = append(published, w.publishFiles(brokertest.Claims("unready-back", "C-back", 1, true)...)...)
	brokertest.Eventually(t, 30*time.Second, "ready again after a call that did not fail", func() bool {
		return strings.HasPrefix(httpGet(t, base+"/readyz"), "200")
	})
	if n := metric(httpGet(t, base+"/metrics"), "eaimq_partner_consecutive_failures"); n != 0 {
		t.Errorf("eaimq_partner_consecutive_failures %v after a 201", n)
	}
	brokertest.Eventually(t, 30*time.Second, "claim.in drained", func() bool {
		q := w.vh.Queues(t)[topo.Queue]
		return q.Messages == 0 && q.Unacked == 0
	})
	p.stop(t)
	w.account(fmt.Sprintf("partner down, default flags: /readyz is 503 within %d failures", k), published, 0, "0",
		fmt.Sprintf("200 after %d failures in a row, 503 at the %dth; not paused; ready again after the first 201", k-1, k))
}
