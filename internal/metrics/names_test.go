package metrics

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// exported is every sample name a consumer's /metrics (or dlq ingest's)
// can carry: the
// families of its registry, with a histogram's _bucket, _sum and _count.
// Every method is called once first, so that a labelled family has a
// series; Describe, which lists the families whether or not they have
// one, proves none was missed.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	m := New(Live{Ready: func() (bool, string) { return true, "" }, Failures: func() int64 { return 0 }, Unacked: func() int64 { return 0 }, VHost: "v"})
	callEach(m)
	names := map[string]bool{}
	gathered(t, m.reg, names)
	// dlq ingest's, which the same rules, dashboard and docs name.
	in := NewIngest()
	in.Counted(1, 2)
	in.Batch(1, 1)
	gathered(t, in.reg, names)
	return names
}

// gathered adds reg's sample names to names, and checks that every
// family it describes has a series.
func gathered(t *testing.T, reg *prometheus.Registry, names map[string]bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		n := f.GetName()
		names[n] = true
		// The type's name, not client_model's constants: this module
		// does not require client_model directly.
		switch f.GetType().String() {
		case "HISTOGRAM":
			names[n+"_bucket"] = true
			fallthrough
		case "SUMMARY":
			names[n+"_sum"], names[n+"_count"] = true, true
		}
	}
	descs := make(chan *prometheus.Desc, 100)
	go func() { reg.Describe(descs); close(descs) }()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		if n := fq.FindStringSubmatch(d.String()); n == nil || !names[n[1]] {
			t.Errorf("a family has no series in the scrape (call its method above): %s", d)
		}
	}
}

// named is every eaimq_ metric name a file mentions.
func named(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range regexp.MustCompile(`\beaimq_[a-z0-9_]*[a-z0-9]`).FindAllString(string(b), -1) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// TestRulesAndDashboardNameExportedMetrics: every metric the alert rules,
// their unit tests, the scrape configuration and the Grafana dashboard
// name is one the consumer or dlq ingest exports, so that no alert waits on a series
// that never comes (an absent series makes an alert expression empty,
// which is silence, not an alarm).
func TestRulesAndDashboardNameExportedMetrics(t *testing.T) {
	have := exported(t)
	deploy := filepath.Join("..", "..", "deploy")
	for _, f := range []string{
		"prometheus/eaimq.rules.yml", "prometheus/eaimq.rules.test.yml", "prometheus/prometheus.yml.example",
		"grafana/eaimq.json",
	} {
		names := named(t, filepath.Join(deploy, f))
		if strings.HasSuffix(f, ".rules.yml") || strings.HasSuffix(f, ".json") {
			if len(names) < 5 {
				t.Errorf("%s names %d eaimq metrics (%v): is the pattern still right?", f, len(names), names)
			}
		}
		for _, n := range names {
			if !have[n] {
				t.Errorf("%s names %s, which neither the consumer nor dlq ingest exports", f, n)
			}
		}
	}
}

// TestMetricsDocumented: the metrics table of docs/retries-and-metrics.md
// lists every eaimq_ metric the consumer and dlq ingest export, and the operator's docs
// name no other.
func TestMetricsDocumented(t *testing.T) {
	have := exported(t)
	docs := filepath.Join("..", "..", "docs")
	table := named(t, filepath.Join(docs, "retries-and-metrics.md"))
	for n := range have {
		if strings.HasPrefix(n, "eaimq_") && !strings.HasSuffix(n, "_bucket") && !strings.HasSuffix(n, "_sum") &&
			!strings.HasSuffix(n, "_count") && !slices.Contains(table, n) {
			t.Errorf("docs/retries-and-metrics.md does not list %s", n)
		}
	}
	notMetrics := map[string]bool{ // the PostgreSQL store's tables
		"eaimq_schema": true, // its version
		"eaimq_audit":  true, // dlq's audit trail (the backups name it)
	}
	for _, f := range []string{"retries-and-metrics.md", "operations.md"} {
		for _, n := range named(t, filepath.Join(docs, f)) {
			if !have[n] && !notMetrics[n] {
				t.Errorf("docs/%s names %s, which neither the consumer nor dlq ingest exports", f, n)
			}
		}
	}
}
