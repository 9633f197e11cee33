package metrics

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dashboard is what the tests read of deploy/grafana/eaimq.json.
type dashboard struct {
	Templating struct {
		List []struct {
			Name, Type string
			Query      json.RawMessage
			AllValue   *string `json:"allValue"`
			IncludeAll bool    `json:"includeAll"`
			Multi      bool
		}
	}
	Panels []struct {
		Title   string
		Targets []struct{ Expr string }
	}
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "eaimq.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("eaimq.json: %v", err)
	}
	return d
}

// TestDashboardSelectors: the dashboard has a vhost and an instance
// selector, and every metric selector of every panel's queries uses
// $instance, and $vhost too where the metric has a vhost label (the
// queue metrics). The claim metrics carry no vhost: the instance list is
// the consumers of the chosen vhosts, and its "All" must stay that list
// (no custom all value such as .*), or choosing a vhost would not narrow
// those panels.
func TestDashboardSelectors(t *testing.T) {
	d := readDashboard(t)
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if json.Unmarshal(v.Query, &q) != nil {
			json.Unmarshal(v.Query, &q.Query) // the older form: a string
		}
		vars[v.Name] = q.Query
		if !v.Multi || !v.IncludeAll || (v.AllValue != nil && *v.AllValue != "") {
			t.Errorf("variable %s: multi %v, includeAll %v, allValue %v; want several values, All, and no custom all value",
				v.Name, v.Multi, v.IncludeAll, v.AllValue)
		}
	}
	have := exported(t)
	for name, want := range map[string]*regexp.Regexp{
		"vhost":    regexp.MustCompile(`^label_values\((eaimq_[a-z_]+), vhost\)$`),
		"instance": regexp.MustCompile(`^label_values\((eaimq_[a-z_]+)\{vhost=~"\$vhost"\}, instance\)$`),
	} {
		m := want.FindStringSubmatch(vars[name])
		if m == nil {
			t.Errorf("variable %s: query %q, want %s", name, vars[name], want)
			continue
		}
		if !have[m[1]] {
			t.Errorf("variable %s reads %s, which the consumer does not export", name, m[1])
		}
	}
	// A selector: a metric name and its braces, if any.
	sel := regexp.MustCompile(`\b(eaimq_[a-z0-9_]*[a-z0-9])(\{[^}]*\})?`)
	n := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, m := range sel.FindAllStringSubmatch(tg.Expr, -1) {
				n++
				if !strings.Contains(m[2], `instance=~"$instance"`) {
					t.Errorf("panel %q: %s does not select instance=~\"$instance\": %s", p.Title, m[1], tg.Expr)
				}
				if strings.HasPrefix(m[1], "eaimq_queue_") && !strings.Contains(m[2], `vhost=~"$vhost"`) {
					t.Errorf("panel %q: %s does not select vhost=~\"$vhost\": %s", p.Title, m[1], tg.Expr)
				}
			}
		}
	}
	if n < 16 {
		t.Errorf("%d metric selectors in the panels: is the pattern still right?", n)
	}
}

// TestDashboardShowsEveryQueue: the queues the consumer reports a depth
// for each have a panel: claim.in, claim.dead, and the delay queues
// (eaimq_queue_messages_ready{queue="claim.retry.30s"}, ...), so that a
// claim waiting anywhere is on the dashboard.
func TestDashboardShowsEveryQueue(t *testing.T) {
	d := readDashboard(t)
	for _, q := range []string{`queue="claim.in"`, `queue="claim.dead"`, `queue=~"claim[.]retry[.].+"`} {
		found := false
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				found = found || strings.Contains(tg.Expr, "eaimq_queue_messages_ready{"+q)
			}
		}
		if !found {
			t.Errorf("no panel shows eaimq_queue_messages_ready{%s}", q)
		}
	}
}

// TestDashboardDocumented: the panel table of docs/operations.md has each
// panel of the dashboard, by its title, with its query as the dashboard
// has it (the latency panel's three quantiles written as one), so that
// the page an operator reads shows what the panels ask.
func TestDashboardDocumented(t *testing.T) {
	d := readDashboard(t)
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
			continue
		}
		q := p.Targets[0].Expr
		if len(p.Targets) > 1 {
			q = strings.Replace(q, "histogram_quantile(0.5,", "histogram_quantile(0.5 | 0.95 | 0.99,", 1)
		}
		row := "| " + p.Title + " | `" + strings.ReplaceAll(q, "|", `\|`) + "` |"
		if !strings.Contains(page, row) {
			t.Errorf("docs/operations.md has no row\n%s", row)
		}
	}
}
