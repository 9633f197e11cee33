package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"eaimq/internal/benchtest"
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
// With the server on this host it also reports the CPU its backends for
// the store spent per claim (server-µs/claim, from /proc: user and system
// time, which counts the WAL's fdatasync calls too), after a warm-up that
// opens and prepares every connection.
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
			for i := range 10 * p {
				id := fmt.Sprintf("%s-warm-%d", b.Name(), i)
				if _, err := s.Begin(ctx, id, claim.Copy{ClaimID: "C", Fresh: true}, time.Minute); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Finish(ctx, id, claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil {
					b.Fatal(err)
				}
			}
			before, ok := serverCPU(b, loc)
			beginFinish(b, s, p)
			if after, ok2 := serverCPU(b, loc); ok && ok2 {
				b.ReportMetric(float64((after-before).Microseconds())/float64(b.N), "server-µs/claim")
			}
		})
	}
}

// serverCPU is the CPU time the server's backends for the database at loc
// (other than the one asking) have spent so far; ok is false when /proc
// does not show them (a server on another host).
func serverCPU(b *testing.B, loc string) (cpu time.Duration, ok bool) {
	b.Helper()
	conn, err := pgx.Connect(ctx, loc)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	tick := 10 * time.Millisecond // USER_HZ is 100 on Linux
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, false
		}
		// utime and stime are the 14th and 15th fields; the 2nd, the
		// command in parentheses, may hold spaces.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 13 {
			return 0, false
		}
		u, err1 := strconv.ParseInt(f[11], 10, 64)
		st, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, false
		}
		cpu += time.Duration(u+st) * tick
	}
	return cpu, len(pids) > 0
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

// storeAblations are the SQLite store's speed mechanisms, each turned off
// alone (Options.Ablation: no flag a user sees does it), after "all-on".
var storeAblations = []struct {
	name string
	off  Ablation
}{
	{"all-on", Ablation{}},
	{"no-solo", Ablation{NoSolo: true}},
	{"no-known", Ablation{NoKnown: true}},
	{"no-wal-sync", Ablation{NoWALSync: true}},
	// The WAL's own fsync in shared mode, where it also spares the
	// in-progress rows an fsync: measured against no-solo.
	{"no-solo+no-wal-sync", Ablation{NoSolo: true, NoWALSync: true}},
}

// BenchmarkStoreAblation is the ablation table's store column: n claims
// through Begin and Finish (sync=full, P=5, a new file each turn) with
// every mechanism on and with each off alone, in turn within each round.
// For each mechanism it reports what it buys, the median and range over
// the rounds of the time with it off over the time with it on (each round
// against its own all-on turn), and the CPU (rusage, user + sys) off over
// on.
//
//	go test -run '^$' -bench StoreAblation -benchtime 5x ./internal/store
func BenchmarkStoreAblation(b *testing.B) {
	const n, p = 3000, 5
	gain := make([][]float64, len(storeAblations))
	cpuCost := make([][]float64, len(storeAblations))
	var sharedGain, sharedCPU []float64 // the last against no-solo
	round := 0
	for b.Loop() {
		round++
		took := make([]time.Duration, len(storeAblations))
		cpu := make([]time.Duration, len(storeAblations))
		for i, a := range storeAblations {
			s, err := Open(filepath.Join(b.TempDir(), "p.db"), Options{Synchronous: "full", Ablation: a.off})
			if err != nil {
				b.Fatal(err)
			}
			start, before := time.Now(), cpuTime(b)
			claims(b, s, fmt.Sprintf("%s-%d", a.name, round), n, p)
			took[i], cpu[i] = time.Since(start), cpuTime(b)-before
			s.Close()
		}
		for i := range storeAblations {
			gain[i] = append(gain[i], float64(took[i])/float64(took[0]))
			cpuCost[i] = append(cpuCost[i], float64(cpu[i])/float64(cpu[0]))
		}
		last := len(storeAblations) - 1
		sharedGain = append(sharedGain, float64(took[last])/float64(took[1]))
		sharedCPU = append(sharedCPU, float64(cpu[last])/float64(cpu[1]))
	}
	for i, a := range storeAblations[1 : len(storeAblations)-1] {
		benchtest.Spread(b, gain[i+1], "on/off-rate-"+a.name)
		benchtest.Spread(b, cpuCost[i+1], "off/on-cpu-"+a.name)
	}
	benchtest.Spread(b, sharedGain, "on/off-rate-no-wal-sync-shared")
	benchtest.Spread(b, sharedCPU, "off/on-cpu-no-wal-sync-shared")
}

// cpuTime is the CPU this process has used, user and system (rusage).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStoreHistory is the store's side of a drain on a file that
// holds earlier records: n claims through Begin and Finish (sync=full,
// P=5, the store opened anew, as a consumer starts) on a file with
// 1,000,000 earlier records, against the same on an empty file,
// alternating in one run; with every mechanism on and with the filter of
// known ids off. It reports the rate on the full file over the rate on
// the empty one (median and range of the rounds) and the same for CPU.
//
//	go test -run '^$' -bench StoreHistory -benchtime 5x ./internal/store
func BenchmarkStoreHistory(b *testing.B) {
	for _, records := range []int{1_000_000} {
		for _, a := range storeAblations[:3:3] {
			if a.name == "no-solo" {
				continue
			}
			b.Run(fmt.Sprintf("records=%d/%s", records, a.name), func(b *testing.B) {
				const n, p = 3000, 5
				dir := b.TempDir()
				full := filepath.Join(dir, "full.db")
				benchtest.EarlierRecords(b, full, records)
				var rate, cpuRatio []float64
				round := 0
				for b.Loop() {
					round++
					turn := func(path string) (time.Duration, time.Duration) {
						s, err := Open(path, Options{Synchronous: "full", Ablation: a.off})
						if err != nil {
							b.Fatal(err)
						}
						defer s.Close()
						start, before := time.Now(), cpuTime(b)
						claims(b, s, fmt.Sprintf("%s-%d", path, round), n, p)
						return time.Since(start), cpuTime(b) - before
					}
					te, ce := turn(filepath.Join(dir, fmt.Sprintf("empty%d.db", round)))
					tf, cf := turn(full)
					rate = append(rate, float64(te)/float64(tf))
					cpuRatio = append(cpuRatio, float64(cf)/float64(ce))
				}
				benchtest.Spread(b, rate, "full/empty-rate")
				benchtest.Spread(b, cpuRatio, "full/empty-cpu")
			})
		}
	}
}
