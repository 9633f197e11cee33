package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"eaimq/internal/claim"
	"eaimq/internal/pgtest"
)

// BenchmarkBeginFinish is the store's share of one delivered claim (Begin,
// then Finish with the delivered outcome) with P workers at once, at each
// synchronous setting.
//
//	go test -run '^$' -bench BeginFinish ./internal/store
func BenchmarkBeginFinish(b *testing.B) {
	for _, sync_ := range []string{"full", "normal"} {
		for _, p := range []int{1, 5, 20} {
			b.Run(fmt.Sprintf("sync=%s/P=%d", sync_, p), func(b *testing.B) {
				s, err := Open(filepath.Join(b.TempDir(), "p.db"), Options{Synchronous: sync_})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				beginFinish(b, s, p)
			})
		}
	}
}

// BenchmarkPostgresBeginFinish is the same on PostgreSQL (a local server).
//
//	go test -run '^$' -bench PostgresBeginFinish ./internal/store
func BenchmarkPostgresBeginFinish(b *testing.B) {
	loc := pgtest.New(b)
	for _, p := range []int{1, 5, 20} {
		b.Run(fmt.Sprintf("P=%d", p), func(b *testing.B) {
			s, err := Open(loc, Options{Conns: p})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			beginFinish(b, s, p)
		})
	}
}

// beginFinish runs b.N claims through s with p workers at once. The ids
// carry the benchmark's name: one database serves every sub-benchmark.
func beginFinish(b *testing.B, s Store, p int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				id := fmt.Sprintf("%s-id-%d", b.Name(), i)
				if _, err := s.Begin(ctx, id, claim.Copy{ClaimID: "C", Fresh: true}, time.Minute); err != nil {
					b.Error(err)
					return
				}
				if _, err := s.Finish(ctx, id, claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkStoreGrowth is the file's size per million delivered claims,
// and what retention does to it: 100,000 claims through Begin and Finish
// (solo, P=20), the file measured closed (WAL checkpointed); then every
// record pruned and 100,000 more claims: the pages freed are reused, so the
// file does not grow (target: within 5%).
//
//	go test -run '^$' -bench StoreGrowth -benchtime 1x ./internal/store
func BenchmarkStoreGrowth(b *testing.B) {
	const n = 100_000
	var first, second int64
	for b.Loop() {
		path := filepath.Join(b.TempDir(), "p.db")
		round := func(prefix string) int64 {
			s, err := Open(path, Options{Synchronous: "normal"})
			if err != nil {
				b.Fatal(err)
			}
			claims(b, s, prefix, n, 20)
			s.Close()
			fi, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			return fi.Size()
		}
		first = round("first")
		s, err := Open(path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if got, err := s.Prune(ctx, time.Now().Add(time.Hour), PruneBatch); err != nil || got != n {
			b.Fatalf("pruned %d, %v; want %d", got, err, n)
		}
		s.Close()
		second = round("second")
	}
	b.ReportMetric(float64(first)/n*1e6/(1<<20), "MiB-per-1M-claims")
	b.ReportMetric(float64(second)/float64(first), "size-after-prune+100k/100k")
}

// claims runs n delivered claims through s with p workers.
func claims(b *testing.B, s Store, prefix string, n, p int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				// Random-looking ids, as guids are: a record lands anywhere
				// in the table, not at its end.
				h := sha256.Sum256(fmt.Appendf(nil, "%s-%d", prefix, i))
				id := hex.EncodeToString(h[:16])
				if _, err := s.Begin(ctx, id, claim.Copy{ClaimID: "C-" + id, Fresh: true}, time.Minute); err != nil {
					b.Error(err)
					return
				}
				if _, err := s.Finish(ctx, id, claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
