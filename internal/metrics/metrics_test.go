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
// start, /readyz and eaimq_ready follow their function, and what is read
// at scrape time (failures in a row, unacked) is read then.
func TestServe(t *testing.T) {
	const why = "paused: the claim system is down"
	var ready atomic.Bool // read by the server's goroutines
	var failures, unacked atomic.Int64
	ready.Store(true)
	failures.Store(4)
	unacked.Store(3)
	m := New(Live{Ready: func() (bool, string) { return ready.Load(), why }, Failures: failures.Load, Unacked: unacked.Load, VHost: "claims"})
	m.Received()
	m.Settled(claim.OutDelivered)
	m.Settled(claim.OutDuplicate)
	m.Call(201, 30*time.Millisecond)
	m.Call(0, time.Second)
	m.RetryScheduled("claim.retry.5s")
	m.Paused()
	m.Resumed(1500 * time.Millisecond)
	m.Reconnected()
	m.QueueReady("claim.in", 120)
	m.QueueReady("claim.dead", 7)
	m.QueueUnknown("claim.dead")
	addr, stop, err := m.Serve(context.Background(), "127.0.0.1:0", "")
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
		"eaimq_ready 1\n",
		"eaimq_partner_consecutive_failures 4\n",
		`eaimq_queue_messages_ready{queue="claim.in",vhost="claims"} 120` + "\n",
		`eaimq_queue_messages_unacked{queue="claim.in",vhost="claims"} 3` + "\n",
		"eaimq_broker_reconnects_total 1\n",
		`eaimq_build_info{goversion="go`,
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
	if strings.Contains(body, `queue="claim.dead"`) {
		t.Errorf("/metrics shows claim.dead's depth after it became unknown")
	}
	ready.Store(false)
	failures.Store(0)
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, why) {
		t.Errorf("/readyz unready: %d %s", code, body)
	}
	_, body = get(t, base+"/metrics")
	for _, want := range []string{"eaimq_ready 0\n", "eaimq_partner_consecutive_failures 0\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics when unready lacks %q", want)
		}
	}
	if _, _, err := m.Serve(context.Background(), addr, ""); err == nil {
		t.Error("a second listener on the same address did not fail")
	}
}

// TestNil: a nil *Consumer (no --metrics-addr) does nothing and does not
// panic.
func TestNil(t *testing.T) {
	callEach(nil)
}

// callEach calls every event method of m (a queue's depth is shown,
// unknown, then shown again: it ends with a series).
func callEach(m *Consumer) {
	m.Received()
	m.Settled(claim.OutDelivered)
	m.Call(201, time.Millisecond)
	m.InFlight(1)
	m.RetryScheduled("claim.retry.1s")
	m.Paused()
	m.Resumed(time.Second)
	m.Commit(time.Millisecond)
	m.Reconnected()
	m.QueueReady("claim.dead", 1)
	m.QueueUnknown("claim.dead")
	m.QueueReady("claim.in", 1)
}
