package metrics

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"eaimq/internal/claim"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServe: the endpoints answer, the counters count what they are told
// under the conventional names, every outcome's series exists from the
// start, and /readyz follows its function.
func TestServe(t *testing.T) {
	m := New()
	m.Received()
	m.Settled(claim.OutDelivered)
	m.Settled(claim.OutDuplicate)
	m.Call(201, 30*time.Millisecond)
	m.Call(0, time.Second)
	m.RetryScheduled("claim.retry.5s")
	m.Paused()
	m.Resumed(1500 * time.Millisecond)
	const why = "paused: the claim system is down"
	var ready atomic.Bool // read by the server's goroutines
	ready.Store(true)
	addr, stop, err := m.Serve(context.Background(), "127.0.0.1:0", func() (bool, string) { return ready.Load(), why })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	base := "http://" + addr
	code, body := get(t, base+"/metrics")
	for _, want := range []string{
		"eaimq_deliveries_received_total 1\n",
		`eaimq_claims_total{outcome="delivered",reason="delivered"} 1` + "\n",
		`eaimq_claims_total{outcome="dead-lettered",reason="failed-twice"} 0` + "\n",
		"eaimq_dedup_hits_total 1\n",
		`eaimq_partner_requests_total{class="2xx"} 1` + "\n",
		`eaimq_partner_requests_total{class="error"} 1` + "\n",
		"eaimq_partner_request_duration_seconds_count 2\n",
		`eaimq_retries_scheduled_total{queue="claim.retry.5s"} 1` + "\n",
		"eaimq_paused 0\n",
		"eaimq_paused_seconds_total 1.5\n",
		"go_goroutines ",
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz ready: %d", code)
	}
	ready.Store(false)
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, why) {
		t.Errorf("/readyz unready: %d %s", code, body)
	}
	if _, _, err := m.Serve(context.Background(), addr, nil); err == nil {
		t.Error("a second listener on the same address did not fail")
	}
}

// TestNil: a nil *Consumer (no --metrics-addr) does nothing and does not
// panic.
func TestNil(t *testing.T) {
	var m *Consumer
	m.Received()
	m.Settled(claim.OutDelivered)
	m.Call(201, time.Millisecond)
	m.InFlight(1)
	m.RetryScheduled("q")
	m.Paused()
	m.Resumed(time.Second)
	m.Commit(time.Millisecond)
}
