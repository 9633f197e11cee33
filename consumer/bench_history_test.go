package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"eaimq/internal/benchtest"
	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/store"
)

// BenchmarkConsumerHistory is the cost of work done before: the drain rate
// of the consumer (prefetch 5, --sync full, instant partner, a new process
// each turn, as a consumer restarts) on a store that holds 1,000,000
// earlier delivered records (records=1M; 10,000,000 in records=10M),
// against the same on an empty store, alternating in one run. It reports
// the ratio of the total times, the median and range of the rounds' own
// ratios, and the same for CPU (rusage, this process's, partner
// included). Targets: at least 0.95 with 1,000,000 records, 0.9 with
// 10,000,000.
//
//	go test -run '^$' -bench 'ConsumerHistory/records=1M' -benchtime 5x ./consumer
//	go test -run '^$' -bench 'ConsumerHistory/records=10M' -benchtime 5x ./consumer
func BenchmarkConsumerHistory(b *testing.B) {
	for _, c := range []struct {
		name    string
		records int
	}{{"1M", 1_000_000}, {"10M", 10_000_000}} {
		b.Run("records="+c.name, func(b *testing.B) {
			const n = 3000
			h := newHarness(b)
			h.hooks = benchAblation(b)
			dir := b.TempDir()
			full := filepath.Join(dir, "full.db")
			built := time.Now()
			benchtest.EarlierRecords(b, full, c.records)
			b.Logf("%d earlier records written in %s", c.records, time.Since(built).Round(time.Second))
			fi, err := os.Stat(full)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			var onEmpty, onFull time.Duration
			var rate, cpu []float64
			round := 0
			for b.Loop() {
				round++
				turn := func(db, prefix string) (took, used time.Duration) {
					h.db = db
					h.partner.Set(resetControl())
					preload(b, h, prefix, n)
					before := cpuTime(b)
					took = consumeAll(b, h, n, "--prefetch", "5")
					return took, cpuTime(b) - before
				}
				te, ce := turn(filepath.Join(dir, fmt.Sprintf("empty%d.db", round)), fmt.Sprintf("empty%d", round))
				tf, cf := turn(full, fmt.Sprintf("full%d", round))
				onEmpty += te
				onFull += tf
				rate = append(rate, float64(te)/float64(tf))
				cpu = append(cpu, float64(cf)/float64(ce))
			}
			b.ReportMetric(float64(onEmpty)/float64(onFull), c.name+"/empty")
			benchtest.Spread(b, rate, "full/empty-rate")
			benchtest.Spread(b, cpu, "full/empty-cpu")
			b.ReportMetric(float64(n*b.N)/onEmpty.Seconds(), "claims/s-empty")
			b.ReportMetric(float64(n*b.N)/onFull.Seconds(), "claims/s-full")
			b.ReportMetric(float64(fi.Size())/(1<<20), "MiB-earlier-records")
		})
	}
}

// BenchmarkConsumerRSS runs one consumer process for 200,000 claims
// (instant partner, the default prefetch 5 and --sync full), publishing
// them in chunks as claim.in drains, and reads its resident memory
// (VmRSS) after 10,000 and after 200,000 claims. Target: the second within
// 10% of the first: nothing the consumer keeps grows with the claims it
// has done.
//
//	go test -run '^$' -bench ConsumerRSS -benchtime 1x ./consumer
func BenchmarkConsumerRSS(b *testing.B) {
	const first, total, chunk = 10_000, 200_000, 10_000
	h := newHarness(b)
	bin := brokertest.Binary(b, "eaimq/consumer")
	var rss10k, rss200k float64
	for b.Loop() {
		h.partner.Set(resetControl())
		cmd := exec.Command(bin, "--claim", h.url, "--log-level", "warn")
		cmd.Env = append(os.Environ(), broker.EnvURL+"="+h.vh.URL, store.EnvPath+"="+h.db)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		published := 0
		at := func(claims int) float64 {
			for h.partner.Total() < claims {
				if published < total && published-h.partner.Total() < 2*chunk {
					preload(b, h, fmt.Sprintf("rss-%07d", published), chunk)
					published += chunk
					continue
				}
				select {
				case err := <-exited:
					b.Fatalf("consumer exited: %v\n%s", err, errb.String())
				case <-time.After(5 * time.Millisecond):
				}
			}
			return vmRSS(b, cmd.Process.Pid)
		}
		rss10k = at(first)
		rss200k = at(total)
		cmd.Process.Signal(os.Interrupt)
		if err := <-exited; err != nil {
			b.Fatalf("consumer: %v\n%s", err, errb.String())
		}
		if want := fmt.Sprintf("%d delivered", total); !strings.Contains(out.String(), want) {
			b.Fatalf("summary: %s", out.String())
		}
	}
	b.ReportMetric(rss200k/rss10k, "rss200k/rss10k")
	b.ReportMetric(rss10k/(1<<20), "MiB-at-10k")
	b.ReportMetric(rss200k/(1<<20), "MiB-at-200k")
}

// vmRSS is the resident memory of process pid, in bytes.
func vmRSS(b *testing.B, pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				b.Fatal(err)
			}
			return float64(kb) * 1024
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
