package main

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"eaimq/internal/pgtest"
)

// consumeAllWith runs k consumers at once (each with its own broker
// connection and its own store, as k processes would have) until the
// partner has answered n calls, stops them, and returns how long it took.
func consumeAllWith(b *testing.B, h *harness, k, n int, args ...string) time.Duration {
	start := time.Now()
	var cs []*consumer
	for range k {
		cs = append(cs, h.start(append(args, "--log-level", "warn")...))
	}
	for h.partner.Total() < n {
		for _, c := range cs {
			select {
			case <-c.done:
				b.Fatalf("consumer exited: %s", c.stderr.String())
			default:
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); c.wait(b) }()
	}
	wg.Wait()
	if got := len(h.partner.Stats().Accepted); got != n {
		b.Fatalf("%d claims accepted, want %d", got, n)
	}
	return time.Since(start)
}

// BenchmarkScaleOutPostgres measures what the shared PostgreSQL store buys
// and costs, each as a ratio within one run on one broker:
//
//   - partner=50ms: three consumers sharing one PostgreSQL store against
//     one, prefetch 5 each. Little's law allows 5 / 0.05 s = 100 claims/s
//     for one and 300 for three; the target is at least 2.7x.
//
//   - partner=instant: one consumer on PostgreSQL against the same
//     consumer on SQLite (--sync full), prefetch 5: the store's own cost.
//
//     go test -run '^$' -bench ScaleOutPostgres -benchtime 3x ./consumer
func BenchmarkScaleOutPostgres(b *testing.B) {
	b.Run("partner=50ms/3x-vs-1x", func(b *testing.B) {
		const n = 600
		h := newHarness(b)
		h.db = pgtest.New(b)
		var one, three time.Duration
		round := 0
		for b.Loop() {
			round++
			h.partner.Set(resetControl())
			h.partner.Set(claimsysDelay(50))
			preload(b, h, fmt.Sprintf("one%d", round), n)
			one += consumeAllWith(b, h, 1, n, "--prefetch", "5")
			h.partner.Set(resetControl())
			preload(b, h, fmt.Sprintf("three%d", round), n)
			three += consumeAllWith(b, h, 3, n, "--prefetch", "5")
		}
		b.ReportMetric(float64(one)/float64(three), "3x/1x")
		b.ReportMetric(float64(n*b.N)/one.Seconds(), "claims/s-1x")
		b.ReportMetric(float64(n*b.N)/three.Seconds(), "claims/s-3x")
	})
	b.Run("partner=instant/postgres-vs-sqlite", func(b *testing.B) {
		const n = 3000
		h := newHarness(b)
		sqlite, pg := h.db, pgtest.New(b)
		var onSQLite, onPG time.Duration
		round := 0
		for b.Loop() {
			round++
			h.partner.Set(resetControl())
			h.db = sqlite
			preload(b, h, fmt.Sprintf("lite%d", round), n)
			onSQLite += consumeAllWith(b, h, 1, n, "--prefetch", "5")
			h.partner.Set(resetControl())
			h.db = pg
			preload(b, h, fmt.Sprintf("pg%d", round), n)
			onPG += consumeAllWith(b, h, 1, n, "--prefetch", "5")
		}
		b.ReportMetric(float64(onSQLite)/float64(onPG), "postgres/sqlite")
		b.ReportMetric(float64(n*b.N)/onSQLite.Seconds(), "claims/s-sqlite")
		b.ReportMetric(float64(n*b.N)/onPG.Seconds(), "claims/s-postgres")
	})
}
