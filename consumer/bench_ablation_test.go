package main

import (
	"flag"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"eaimq/internal/benchtest"
	"eaimq/internal/relay"
	"eaimq/internal/store"
)

// ablations are the speed mechanisms a benchmark turns off one at a time
// (relay.Hooks: no flag a user sees does it), after "all-on", the
// consumer as it runs.
var ablations = []struct {
	name  string
	hooks relay.Hooks
}{
	{"all-on", relay.Hooks{}},
	{"no-ack-batch", relay.Hooks{NoAckBatch: true}},
	{"no-solo", relay.Hooks{Ablation: store.Ablation{NoSolo: true}}},
	{"no-known", relay.Hooks{Ablation: store.Ablation{NoKnown: true}}},
	{"no-wal-sync", relay.Hooks{Ablation: store.Ablation{NoWALSync: true}}},
}

// BenchmarkConsumerAblation is the ablation table's consumer columns: a
// drain of n claims (instant partner, --sync full, an empty store each
// turn) with every mechanism on, and with each turned off alone, in turn
// within each round (A B C ... A B C ...), at prefetch 5 and 50. For each
// mechanism it reports what it buys: the rate with it on over the rate
// with it off, the median of the rounds and their range (min, max), each
// round's ratio against the all-on turn of the same round; and the CPU
// (rusage, user + sys, of this process, partner included) off over on.
// A mechanism buys nothing measurable when its range reaches 1.
//
//	go test -run '^$' -bench ConsumerAblation -benchtime 5x ./consumer
func BenchmarkConsumerAblation(b *testing.B) {
	for _, prefetch := range []int{5, 50} {
		b.Run(fmt.Sprintf("prefetch=%d", prefetch), func(b *testing.B) {
			const n = 3000
			h := newHarness(b)
			dir := b.TempDir()
			gain := make([][]float64, len(ablations))    // on rate / off rate, each round
			cpuCost := make([][]float64, len(ablations)) // off CPU / on CPU, each round
			round := 0
			for b.Loop() {
				round++
				took := make([]time.Duration, len(ablations))
				cpu := make([]time.Duration, len(ablations))
				for i, a := range ablations {
					h.hooks = a.hooks
					h.db = filepath.Join(dir, fmt.Sprintf("%s-%d.db", a.name, round))
					h.partner.Set(resetControl())
					preload(b, h, fmt.Sprintf("%s-%d", a.name, round), n)
					before := cpuTime(b)
					took[i] = consumeAll(b, h, n, "--prefetch", fmt.Sprint(prefetch), "--sync", "full")
					cpu[i] = cpuTime(b) - before
				}
				for i := range ablations {
					gain[i] = append(gain[i], float64(took[i])/float64(took[0]))
					cpuCost[i] = append(cpuCost[i], float64(cpu[i])/float64(cpu[0]))
				}
				b.ReportMetric(float64(n)/took[0].Seconds(), "claims/s-all-on-last-round")
			}
			h.hooks = relay.Hooks{}
			for i, a := range ablations[1:] {
				benchtest.Spread(b, gain[i+1], "on/off-rate-"+a.name)
				benchtest.Spread(b, cpuCost[i+1], "off/on-cpu-"+a.name)
			}
		})
	}
}

// benchAblation is the hooks of the mechanism -bench-ablate names (none:
// all on), for a benchmark run with one mechanism off:
// go test -bench ConsumerHistory ./consumer -args -bench-ablate no-known
func benchAblation(b *testing.B) relay.Hooks {
	for _, a := range ablations {
		if a.name == *benchAblate || *benchAblate == "" && a.name == "all-on" {
			return a.hooks
		}
	}
	b.Fatalf("-bench-ablate %q: not a mechanism", *benchAblate)
	return relay.Hooks{}
}

var benchAblate = flag.String("bench-ablate", "", "the mechanism the history benchmark turns off (no-known, no-solo, ...)")
