package store

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
				s, err := OpenSQLite(filepath.Join(b.TempDir(), "p.db"), Options{Synchronous: sync_})
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
			s, err := OpenPostgres(loc, Options{Conns: p})
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
				if _, err := s.Begin(ctx, id, "C", true, time.Minute); err != nil {
					b.Error(err)
					return
				}
				if _, err := s.Finish(ctx, id, Attempt{Status: 201, Outcome: OutDelivered, Called: true}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
