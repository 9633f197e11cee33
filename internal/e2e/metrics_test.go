package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/topo"
)

// httpGet returns "STATUS body" of a GET, or "error: ..." when nothing
// answered.
func httpGet(t testing.TB, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, b)
}

// metric reads one sample's value from a scrape; -1 when absent.
func metric(scrape, series string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(scrape)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestMetricsAddUp scrapes /metrics while a consumer runs, and at the end
// checks that the counters are the summary's numbers: received, each
// outcome, partner calls.
func TestMetricsAddUp(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.partner.Set(ms(30))
	var claims [][]byte
	claims = append(claims, brokertest.Claims("m-ok", "C-m", 40, true)...)
	claims = append(claims, brokertest.Claims("m-422", "C-m422", 5, false)...)
	for i := range 5 {
		claims = append(claims, brokertest.Claim(fmt.Sprintf("m-busy-%d", i), fmt.Sprintf("BUSY-%d", i), "r.pdf"))
	}
	w.publishFiles(claims...)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := w.start("consumer", "--claim", w.url, "--max-seconds", "120", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port), "--json")
	brokertest.Eventually(t, 30*time.Second, "a scrape during the run", func() bool {
		s := httpGet(t, base+"/metrics")
		return strings.HasPrefix(s, "200") && metric(s, `eaimq_claims_total{outcome="delivered",reason="delivered"}`) > 0 &&
			len(w.partner.Stats().Accepted) < 40
	})
	if h := httpGet(t, base+"/healthz"); !strings.HasPrefix(h, "200") {
		t.Errorf("/healthz: %s", h)
	}
	if r := httpGet(t, base+"/readyz"); !strings.HasPrefix(r, "200") {
		t.Errorf("/readyz during the run: %s", r)
	}
	brokertest.Eventually(t, 60*time.Second, "claim.in drained", func() bool {
		q := w.vh.Queues(t)[topo.Queue]
		return q.Messages == 0 && q.Unacked == 0
	})
	last := httpGet(t, base+"/metrics")
	p.stop(t)
	var sum map[string]float64
	if err := json.Unmarshal([]byte(p.out.String()), &sum); err != nil {
		t.Fatalf("summary %q: %v", p.out.String(), err)
	}
	for series, want := range map[string]float64{
		`eaimq_deliveries_received_total`:                                        sum["received"],
		`eaimq_claims_total{outcome="delivered",reason="delivered"}`:             sum["delivered"],
		`eaimq_claims_total{outcome="requeued",reason="retry"}`:                  sum["requeued"],
		`eaimq_claims_total{outcome="dead-lettered",reason="rejected"}`:          sum["rejected"],
		`eaimq_claims_total{outcome="dead-lettered",reason="failed-twice"}`:      sum["failed_twice"],
		`eaimq_claims_total{outcome="duplicate",reason="duplicate"}`:             sum["duplicates"],
		`eaimq_partner_requests_total{class="2xx"}`:                              sum["delivered"],
		`eaimq_partner_requests_total{class="4xx"}`:                              sum["rejected"],
		`eaimq_partner_requests_total{class="5xx"}`:                              sum["requeued"] + sum["failed_twice"],
		`eaimq_partner_request_duration_seconds_count`:                           float64(w.partner.Stats().Total),
		`eaimq_claims_in_flight`:                                                 0,
		`eaimq_claims_total{outcome="dead-lettered",reason="unexpected-status"}`: 0,
	} {
		if got := metric(last, series); got != want {
			t.Errorf("%s = %v, summary says %v", series, got, want)
		}
	}
	if sum["delivered"] != 40 || sum["rejected"] != 5 || sum["failed_twice"] != 5 {
		t.Errorf("summary: %v", sum)
	}
}

// TestReadyzFollowsTheBroker: /readyz answers 503 while the consumer's
// broker connection is gone, and 200 again after it reconnected. The
// connection is closed with rabbitmqctl close_connection (this test's own,
// found by its vhost), and the user's permission on the test's vhost is
// withdrawn meanwhile, so that the reconnect waits until the test has seen
// the consumer unready.
func TestReadyzFollowsTheBroker(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := w.start("consumer", "--claim", w.url, "--max-seconds", "120", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
	brokertest.Eventually(t, 30*time.Second, "ready", func() bool {
		if p.exited() {
			t.Fatalf("consumer exited: %s", p.errb.String())
		}
		return strings.HasPrefix(httpGet(t, base+"/readyz"), "200")
	})
	ctx := context.Background()
	if _, err := w.vh.Ctl.Run(ctx, "-q", "clear_permissions", "-p", w.vh.Name, "guest"); err != nil {
		t.Fatal(err)
	}
	// The table form: its pids are in the form close_connection takes
	// (the JSON form prints them as Erlang terms it does not).
	out, err := w.vh.Ctl.Run(ctx, "-q", "list_connections", "pid", "vhost", "--no-table-headers")
	if err != nil {
		t.Fatal(err)
	}
	closed := 0
	for _, line := range strings.Split(string(out), "\n") {
		pid, vhost, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if ok && vhost == w.vh.Name {
			if _, err := w.vh.Ctl.Run(ctx, "-q", "close_connection", pid, "eaimq test: readyz"); err != nil {
				t.Fatal(err)
			}
			closed++
		}
	}
	if closed != 1 {
		t.Fatalf("closed %d connections of vhost %s, want the consumer's one", closed, w.vh.Name)
	}
	brokertest.Eventually(t, 15*time.Second, "unready", func() bool {
		return strings.HasPrefix(httpGet(t, base+"/readyz"), "503")
	})
	if _, err := w.vh.Ctl.Run(ctx, "-q", "set_permissions", "-p", w.vh.Name, "guest", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 30*time.Second, "ready again after the reconnect", func() bool {
		if p.exited() {
			t.Fatalf("consumer exited: %s", p.errb.String())
		}
		return strings.HasPrefix(httpGet(t, base+"/readyz"), "200")
	})
	if !strings.Contains(p.errb.String(), "reconnected") {
		t.Errorf("no reconnect in the log:\n%s", p.errb.String())
	}
	p.stop(t)
}
