package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/topo"
)

// preload publishes n distinct claims (not timed).
func preload(b *testing.B, h *harness, prefix string, n int) {
	var claims [][]byte
	pad := strings.Repeat("x", 300)
	for i := range n {
		g := fmt.Sprintf("%s-%06d", prefix, i)
		claims = append(claims, []byte(`{"guid":"`+g+`","claimId":"C-`+g+`","docs":["r.pdf"],"note":"`+pad+`"}`))
	}
	for len(claims) > 0 {
		k := min(len(claims), 1000)
		h.vh.PublishClaims(b, claims[:k]...)
		claims = claims[k:]
	}
}

// consumeAll runs the consumer until the partner has answered n calls and
// the drained run has exited, and returns how long that took.
func consumeAll(b *testing.B, h *harness, n int, args ...string) time.Duration {
	start := time.Now()
	c := h.start(append(args, "--log-level", "warn")...)
	for h.partner.Total() < n {
		select {
		case <-c.done:
			b.Fatalf("consumer exited: %s", c.stderr.String())
		case <-time.After(2 * time.Millisecond):
		}
	}
	// Every call is answered; the graceful stop waits for the last
	// records and acks, so the time includes them.
	c.wait(b)
	if !strings.Contains(c.stdout.String(), fmt.Sprintf("%d delivered", n)) {
		b.Fatalf("summary: %s", c.stdout.String())
	}
	return time.Since(start)
}

// bareDeliveries opens a bare consumer on claim.in with basic.qos
// prefetch. The caller closes conn as soon as its turn ends: a consumer
// left open would take deliveries meant for the next turn.
func bareDeliveries(b *testing.B, h *harness, prefetch int) (conn *amqp.Connection, ds <-chan amqp.Delivery) {
	conn, err := amqp.Dial(h.vh.URL)
	if err != nil {
		b.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		b.Fatal(err)
	}
	ch.Qos(prefetch, 0, false)
	ds, err = ch.Consume(topo.Queue, "", false, false, false, false, nil)
	if err != nil {
		conn.Close()
		b.Fatal(err)
	}
	return conn, ds
}

// bareConsume is the ceiling the issue names: a bare amqp091-go loop, one
// sequential POST per message, ack on 201, no dedup store.
func bareConsume(b *testing.B, h *harness, n int) time.Duration {
	start := time.Now()
	conn, ds := bareDeliveries(b, h, 50)
	defer conn.Close()
	client := &http.Client{}
	for i := 0; i < n; i++ {
		d := <-ds
		resp, err := client.Post(h.url+"/v1/claims", "application/json", bytes.NewReader(d.Body))
		if err != nil {
			b.Fatal(err)
		}
		// Read the body so the connection is reused: a fair ceiling.
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 201 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		d.Ack(false)
	}
	return time.Since(start)
}

// bareConcurrent is the ceiling the issue sets for prefetch 5: a bare
// amqp091-go consumer with inflight POSTs at once (basic.qos inflight, that
// many goroutines, each POST then ack), and no dedup store. With a journal,
// each goroutine also appends a line to it and waits for an fdatasync that
// began after its write before it acks (one fsync shared by whoever wrote
// meanwhile): the least any consumer does that keeps its record durable
// before the ack, with no dedup read and no database.
func bareConcurrent(b *testing.B, h *harness, n, inflight int, j *journal) time.Duration {
	start := time.Now()
	conn, ds := bareDeliveries(b, h, inflight)
	defer conn.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: inflight}}
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				d := <-ds
				resp, err := client.Post(h.url+"/v1/claims", "application/json", bytes.NewReader(d.Body))
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 201 {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
				if j != nil {
					if err := j.record(d.MessageId + " 201\n"); err != nil {
						b.Error(err)
						return
					}
				}
				d.Ack(false)
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// journal is the durable ceiling's record: lines appended to a file, made
// durable by group fdatasync.
type journal struct {
	f       *os.File
	mu      sync.Mutex
	cond    *sync.Cond
	written uint64 // lines written
	synced  uint64 // lines covered by a finished fdatasync
	syncing bool
}

func newJournal(b *testing.B) *journal {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "journal"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	j := &journal{f: f}
	j.cond = sync.NewCond(&j.mu)
	return j
}

// record appends line and returns once an fdatasync that began after the
// write has finished.
func (j *journal) record(line string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.f.WriteString(line); err != nil {
		return err
	}
	j.written++
	mine := j.written
	for j.synced < mine {
		if j.syncing {
			j.cond.Wait()
			continue
		}
		j.syncing = true
		upto := j.written
		j.mu.Unlock()
		err := syscall.Fdatasync(int(j.f.Fd()))
		j.mu.Lock()
		j.syncing = false
		j.cond.Broadcast()
		if err != nil {
			return err
		}
		j.synced = max(j.synced, upto)
	}
	return nil
}

// BenchmarkConsumerVsBare drains N preloaded claims, instant partner, in
// one run on one broker, through: the consumer (dedup store, --sync full:
// each record fsync'd before its ack) at prefetch 5, 50 and 200; a bare
// concurrent amqp091-go consumer with 5 POSTs in flight and no store; the
// bare sequential loop (POST then ack); the bare concurrent consumer with
// a journal fdatasync'd before each ack, at 5 and at 50 in flight (the
// durable ceiling at each prefetch: what fsync alone costs). It reports
// the consumer at prefetch 5 against each bare one, at prefetch 50 against
// the ceiling at 50, prefetch 50 and 200 against 5 (more in flight must
// not be slower), and the CPU (rusage, user + sys, of this process, which
// also runs the partner) per 10,000 claims of the consumer and of the
// durable ceiling at each prefetch. partner=2ms is the sequential ratio
// when the partner takes any time at all.
//
//	go test -run '^$' -bench ConsumerVsBare -benchtime 3x ./consumer
func BenchmarkConsumerVsBare(b *testing.B) {
	b.Run("partner=instant", func(b *testing.B) {
		const n = 3000
		h := newHarness(b)
		var p5, p50, p200, conc, durable, durable50, seq time.Duration
		var cpu5, cpu50, cpuDurable, cpuDurable50 time.Duration
		round := 0
		for b.Loop() {
			round++
			for _, r := range []struct {
				name string
				took *time.Duration
				cpu  *time.Duration // nil: not counted
				run  func(n int) time.Duration
			}{
				{"p5", &p5, &cpu5, func(n int) time.Duration { return consumeAll(b, h, n, "--prefetch", "5", "--sync", *benchSyncFlag) }},
				{"conc", &conc, nil, func(n int) time.Duration { return bareConcurrent(b, h, n, 5, nil) }},
				{"durable", &durable, &cpuDurable, func(n int) time.Duration { return bareConcurrent(b, h, n, 5, newJournal(b)) }},
				{"p50", &p50, &cpu50, func(n int) time.Duration { return consumeAll(b, h, n, "--prefetch", "50", "--sync", *benchSyncFlag) }},
				{"seq", &seq, nil, func(n int) time.Duration { return bareConsume(b, h, n) }},
				{"durable50", &durable50, &cpuDurable50, func(n int) time.Duration { return bareConcurrent(b, h, n, 50, newJournal(b)) }},
				{"p200", &p200, nil, func(n int) time.Duration { return consumeAll(b, h, n, "--prefetch", "200", "--sync", *benchSyncFlag) }},
			} {
				h.partner.Set(resetControl())
				preload(b, h, fmt.Sprintf("%s-%d", r.name, round), n)
				// The CPU is read after the preload, which is not the
				// turn's: what is left is the turn and the in-process
				// partner, which every turn has alike.
				before := cpuTime(b)
				*r.took += r.run(n)
				if r.cpu != nil {
					*r.cpu += cpuTime(b) - before
				}
			}
		}
		rate := func(d time.Duration) float64 { return float64(n*b.N) / d.Seconds() }
		per10k := func(d time.Duration) float64 { return d.Seconds() * 10_000 / float64(n*b.N) }
		b.ReportMetric(float64(conc)/float64(p5), "p5/bare-concurrent")
		b.ReportMetric(float64(durable)/float64(p5), "p5/bare-concurrent-durable")
		b.ReportMetric(float64(durable50)/float64(p50), "p50/bare-concurrent-durable-p50")
		b.ReportMetric(rate(durable50), "claims/s-bare-concurrent-durable-p50")
		b.ReportMetric(per10k(cpu5), "cpu-s/10k-p5")
		b.ReportMetric(per10k(cpu50), "cpu-s/10k-p50")
		b.ReportMetric(per10k(cpuDurable), "cpu-s/10k-durable")
		b.ReportMetric(per10k(cpuDurable50), "cpu-s/10k-durable-p50")
		b.ReportMetric(float64(cpu5)/float64(cpuDurable), "cpu-p5/cpu-durable")
		b.ReportMetric(float64(cpu50)/float64(cpuDurable50), "cpu-p50/cpu-durable-p50")
		b.ReportMetric(float64(conc)/float64(durable), "bare-durable/bare-concurrent")
		b.ReportMetric(float64(seq)/float64(p5), "p5/bare-sequential")
		b.ReportMetric(float64(p5)/float64(p50), "p50/p5")
		b.ReportMetric(float64(p5)/float64(p200), "p200/p5")
		b.ReportMetric(rate(p5), "claims/s-p5")
		b.ReportMetric(rate(p50), "claims/s-p50")
		b.ReportMetric(rate(p200), "claims/s-p200")
		b.ReportMetric(rate(conc), "claims/s-bare-concurrent")
		b.ReportMetric(rate(durable), "claims/s-bare-concurrent-durable")
		b.ReportMetric(rate(seq), "claims/s-bare-sequential")
	})
	b.Run("partner=2ms", func(b *testing.B) {
		const n = 1000
		h := newHarness(b)
		var ours, bare time.Duration
		round := 0
		for b.Loop() {
			round++
			h.partner.Set(resetControl())
			h.partner.Set(claimsysDelay(2))
			preload(b, h, fmt.Sprintf("ours%d", round), n)
			ours += consumeAll(b, h, n, "--prefetch", "20", "--sync", *benchSyncFlag)
			h.partner.Set(resetControl())
			preload(b, h, fmt.Sprintf("bare%d", round), n)
			bare += bareConsume(b, h, n)
		}
		b.ReportMetric(float64(bare)/float64(ours), "consumer/bare")
		b.ReportMetric(float64(n*b.N)/ours.Seconds(), "claims/s")
		b.ReportMetric(float64(n*b.N)/bare.Seconds(), "bare-claims/s")
	})
}

// cpuTime is the CPU this process has used, user and system (rusage): on
// a shared machine a steadier figure than a rate, since another program's
// load takes time from a turn but adds no CPU to it.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkConsumerSlowPartner: the partner takes 50ms per claim and the
// consumer runs with the default prefetch 5. Little's law puts the ceiling
// at 5 / 0.05 s = 100 claims/s; it reports the fraction reached.
//
//	go test -run '^$' -bench ConsumerSlowPartner -benchtime 3x ./consumer
func BenchmarkConsumerSlowPartner(b *testing.B) {
	const n = 500
	h := newHarness(b)
	var ours time.Duration
	round := 0
	for b.Loop() {
		round++
		h.partner.Set(resetControl())
		ms := 50
		h.partner.Set(claimsysDelay(ms))
		preload(b, h, fmt.Sprintf("slow%d", round), n)
		ours += consumeAll(b, h, n)
	}
	rate := float64(n*b.N) / ours.Seconds()
	b.ReportMetric(rate, "claims/s")
	b.ReportMetric(rate/(5/0.05), "of-little's-law")
}

// benchSyncFlag is the consumer's --sync in the benchmarks:
// go test -bench ConsumerVsBare ./consumer -args -bench-sync normal
var benchSyncFlag = flag.String("bench-sync", "full", "the consumer's --sync in the benchmarks")
