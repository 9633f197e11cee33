package model

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	deep   = flag.Bool("model.deep", false, "run the deeper configuration (scripts/model.sh)")
	update = flag.Bool("model.update", false, "rewrite the mutation table in docs/model.md")
)

// figureConfigs are the fixpoint run's searches: two claims, two
// consumers, both modes, every fault kind at budget 1 (crashes and lost
// acks 2), at most two faults in one trace (one with -short).
func figureConfigs(maxFaults int) []Config {
	var cs []Config
	for _, delays := range []int{0, 1} {
		for _, answers := range [][]Answer{{Accepts, AlwaysBusy}, {Refuses, BusyOnce}} {
			cs = append(cs, Config{Answers: answers, Consumers: 2, Delays: delays, Budget: FigureBudget(),
				MaxFaults: maxFaults, StaleStops: true, Rules: Production()})
		}
	}
	return cs
}

// run checks each configuration, logs its line, and returns the sum.
func run(t *testing.T, cs []Config) Result {
	t.Helper()
	total := Result{Fixpoint: true, Duplicates: map[string]int{}}
	for _, c := range cs {
		start := time.Now()
		r := Check(c)
		t.Logf("%v, %d consumers, delays %d, at most %d faults: %s (%s)", c.Answers, c.Consumers, c.Delays, c.MaxFaults, r.Summary(), time.Since(start).Round(time.Millisecond))
		if r.Violation != "" {
			t.Errorf("%v delays %d: %s\n%s", c.Answers, c.Delays, r.Violation, strings.Join(r.Trace, "\n"))
		}
		total.States += r.States
		total.Longest = max(total.Longest, r.Longest)
		total.Fixpoint = total.Fixpoint && r.Fixpoint
		if !r.Fixpoint && total.Why == "" {
			total.Why = r.Why
		}
		for f, n := range r.Fired {
			total.Fired[f] += n
		}
		for w, n := range r.Duplicates {
			total.Duplicates[w] += n
		}
	}
	return total
}

func report(t *testing.T, r Result, took time.Duration) {
	t.Helper()
	var ws []string
	for w, n := range r.Duplicates {
		ws = append(ws, fmt.Sprintf("%s=%d", w, n))
	}
	t.Logf("calls after a final answer, by the windows their traces went through: %s", strings.Join(ws, ", "))
	t.Logf("in %s", took.Round(time.Millisecond))
	fmt.Println(r.Summary()) // the summary line, the last scripts/model.sh prints
}

// TestFixpoint is the figures' run: every reachable state of each
// configuration explored, no invariant broken, every fault fired.
func TestFixpoint(t *testing.T) {
	maxFaults := 2
	if testing.Short() {
		maxFaults = 1
	}
	start := time.Now()
	r := run(t, figureConfigs(maxFaults))
	report(t, r, time.Since(start))
	if !r.Fixpoint {
		t.Errorf("no fixpoint: %s", r.Why)
	}
	for f, n := range r.Fired {
		if n == 0 {
			t.Errorf("fault %s never fired: the model cannot reach the step it needs", Fault(f))
		}
	}
}

// TestDeep is scripts/model.sh's deeper configuration: budget 2 and three
// faults in one trace; and three claims with three consumers.
func TestDeep(t *testing.T) {
	if !*deep {
		t.Skip("the deeper configuration runs with -model.deep (scripts/model.sh)")
	}
	var cs []Config
	for _, delays := range []int{0, 1} {
		cs = append(cs, Config{Answers: []Answer{Accepts, AlwaysBusy}, Consumers: 2, Delays: delays, Budget: Budgets(2),
			MaxFaults: 3, StaleStops: true, Rules: Production(), MaxStates: 20_000_000})
		cs = append(cs, Config{Answers: []Answer{Accepts, Refuses, AlwaysBusy}, Consumers: 3, Delays: delays, Budget: FigureBudget(),
			MaxFaults: 2, StaleStops: true, Rules: Production(), MaxStates: 20_000_000})
	}
	start := time.Now()
	r := run(t, cs)
	report(t, r, time.Since(start))
	if !r.Fixpoint {
		t.Errorf("no fixpoint: %s", r.Why)
	}
}

// TestFindings holds what the checker found in the code it was first run
// on (docs/model.md, "What it found"). All four are fixed: each
// configuration now reaches its fixpoint with the production rules (and
// the relay's StaleStops), and each rule before its fix is a mutant the
// checker kills (TestMutants: the relay's is "a worker goes on after its
// channel closed before its Begin").
func TestFindings(t *testing.T) {
	for _, f := range []struct {
		name string
		cfg  Config
	}{
		{"a worker whose channel closed before its Begin went on and restarted the lineage (the relay, finding 1)",
			Config{Answers: []Answer{AlwaysBusy, Accepts}, Consumers: 2, Delays: 1, Budget: FigureBudget(), MaxFaults: 2, StaleStops: true, Rules: Production()}},
		{"a late holder's delayed retry overwrote another holder's dead-letter decision (claim.Finish, finding 2)",
			Config{Answers: []Answer{AlwaysBusy, Accepts}, Consumers: 2, Delays: 1, Budget: FigureBudget(), MaxFaults: 2, StaleStops: true, Rules: Production()}},
		{"a delayed sibling of a claim dead-lettered at an earlier step was taken for a replay (claim.Begin, finding 3)",
			Config{Answers: []Answer{Refuses, BusyOnce}, Consumers: 2, Delays: 1, Budget: FigureBudget(), MaxFaults: 2, StaleStops: true, Rules: Production()}},
		{"a late holder's dead-letter decision raised the lineage of another's claim (claim.Finish, finding 4: three faults)",
			Config{Answers: []Answer{AlwaysBusy}, Consumers: 2, Delays: 1, Budget: FigureBudget(), MaxFaults: 3, StaleStops: true, Rules: Production()}},
	} {
		if r := Check(f.cfg); r.Violation != "" || !r.Fixpoint {
			t.Errorf("%s: back (%s): %s\n%s", f.name, r.Summary(), r.Violation, strings.Join(r.Trace, "\n"))
		}
	}
}

// TestMutants kills each mutant, and keeps the table in docs/model.md
// true (-model.update rewrites it).
func TestMutants(t *testing.T) {
	var b strings.Builder
	b.WriteString("| # | mutant | mode | invariant broken | states | trace |\n|---|---|---|---|---|---|\n")
	killed := 0
	var traces strings.Builder
	for i, m := range Mutants {
		r := Check(m.Config())
		mode := "lab"
		if m.Delays > 0 {
			mode = "--retry-delays"
		}
		if r.Violation == "" {
			t.Errorf("mutant %d (%s) survived: %s", i+1, m.Name, r.Summary())
			fmt.Fprintf(&b, "| %d | %s | %s | SURVIVED | %d | |\n", i+1, m.Name, mode, r.States)
			continue
		}
		killed++
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %d | %d steps |\n", i+1, m.Name, mode, r.Violation, r.States, len(r.Trace))
		fmt.Fprintf(&traces, "\n%d. %s: %s\n\n", i+1, m.Name, r.Violation)
		for _, l := range r.Trace {
			fmt.Fprintf(&traces, "    %s\n", l)
		}
	}
	fmt.Fprintf(&b, "\n%d of %d killed.\n", killed, len(Mutants))
	table := b.String()
	t.Logf("mutation table:\n%s", table)
	t.Logf("shortest traces:%s", traces.String())
	doc := filepath.Join("..", "..", "docs", "model.md")
	text, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	const open, close = "<!-- mutants: go test ./internal/model -run TestMutants -model.update -->\n", "<!-- /mutants -->"
	i, j := strings.Index(string(text), open), strings.Index(string(text), close)
	if i < 0 || j < i {
		t.Fatalf("%s: no mutation table between %q and %q", doc, strings.TrimSpace(open), close)
	}
	got := string(text[i+len(open) : j])
	want := table + "\nThe shortest traces:\n" + traces.String() + "\n"
	if got == want {
		return
	}
	if !*update {
		t.Errorf("%s: the mutation table is stale: go test ./internal/model -run TestMutants -model.update", doc)
		return
	}
	out := string(text[:i+len(open)]) + want + string(text[j:])
	if err := os.WriteFile(doc, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}
