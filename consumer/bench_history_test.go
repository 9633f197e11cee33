package main

import (
	"bufio"
	"bytes"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/store"
)

// earlierRecords fills a new store at path with n delivered records, as a
// long-running consumer leaves them: random 32-hex-digit message_ids (a
// new claim's record lands anywhere in the table, not at its end), a
// claimId, one call, status 201, the reason word. They are written in bulk
// (not timed, and 1,000,000 claims through the broker would take minutes);
// the schema is the store's own, made by store.Open.
func earlierRecords(b *testing.B, path string, n int) {
	st, err := store.Open(path, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	st.Close()
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	now := time.Now().UnixMilli()
	if _, err := db.Exec(`WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < ?)
		INSERT INTO claims (message_id, state, claim_id, attempts, failures, last_status, reason, updated_at, done_at)
		SELECT lower(hex(randomblob(16))), 'done', 'C-' || n, 1, 0, 201, 'delivered', ? - n, ? - n FROM i`, n, now, now); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkConsumerHistory is the cost of work done before: the drain rate
// of the consumer (prefetch 5, --sync full, instant partner) on a store
// that holds 1,000,000 earlier delivered records, against the same on an
// empty store, alternating in one run. Target: at least 0.9.
//
//	go test -run '^$' -bench ConsumerHistory -benchtime 3x ./consumer
func BenchmarkConsumerHistory(b *testing.B) {
	const n = 3000
	h := newHarness(b)
	dir := b.TempDir()
	full := filepath.Join(dir, "full.db")
	earlierRecords(b, full, 1_000_000)
	fi, err := os.Stat(full)
	if err != nil {
		b.Fatal(err)
	}
	var onEmpty, onFull time.Duration
	round := 0
	for b.Loop() {
		round++
		h.db = filepath.Join(dir, fmt.Sprintf("empty%d.db", round))
		h.partner.Set(resetControl())
		preload(b, h, fmt.Sprintf("empty%d", round), n)
		onEmpty += consumeAll(b, h, n, "--prefetch", "5")
		h.db = full
		h.partner.Set(resetControl())
		preload(b, h, fmt.Sprintf("full%d", round), n)
		onFull += consumeAll(b, h, n, "--prefetch", "5")
	}
	b.ReportMetric(float64(onEmpty)/float64(onFull), "1M/empty")
	b.ReportMetric(float64(n*b.N)/onEmpty.Seconds(), "claims/s-empty")
	b.ReportMetric(float64(n*b.N)/onFull.Seconds(), "claims/s-1M")
	b.ReportMetric(float64(fi.Size())/(1<<20), "MiB-per-1M-records")
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
