package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
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

// bareConsume is the ceiling the issue names: a bare amqp091-go loop, one
// sequential POST per message, ack on 201, no dedup store.
func bareConsume(b *testing.B, h *harness, n int) time.Duration {
	start := time.Now()
	conn, err := amqp.Dial(h.vh.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	ch.Qos(50, 0, false)
	ds, err := ch.Consume(topo.Queue, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
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

// BenchmarkConsumerVsBare drains N preloaded claims through the consumer
// (dedup store, fsync'd records, acks after them, prefetch 20) and, in the
// same run on the same broker, through the bare loop. It reports
// consumer/bare as a throughput ratio. With an instant partner everything
// is CPU on two cores shared with the broker and the partner, and the
// consumer does more per claim (two SQLite transactions); with a partner
// that takes 2 ms, concurrency pays.
//
//	go test -run '^$' -bench ConsumerVsBare -benchtime 3x ./consumer
func BenchmarkConsumerVsBare(b *testing.B) {
	for _, tc := range []struct {
		name    string
		delayMS int
		n       int
	}{{"partner=instant", 0, 5000}, {"partner=2ms", 2, 1000}} {
		b.Run(tc.name, func(b *testing.B) {
			h := newHarness(b)
			var ours, bare time.Duration
			round := 0
			for b.Loop() {
				round++
				h.partner.Set(resetControl())
				h.partner.Set(claimsysDelay(tc.delayMS))
				preload(b, h, fmt.Sprintf("ours%d", round), tc.n)
				ours += consumeAll(b, h, tc.n, "--prefetch", *benchPrefetch, "--sync", *benchSyncFlag)
				h.partner.Set(resetControl())
				preload(b, h, fmt.Sprintf("bare%d", round), tc.n)
				bare += bareConsume(b, h, tc.n)
			}
			b.ReportMetric(float64(bare)/float64(ours), "consumer/bare")
			b.ReportMetric(float64(tc.n*b.N)/ours.Seconds(), "claims/s")
			b.ReportMetric(float64(tc.n*b.N)/bare.Seconds(), "bare-claims/s")
		})
	}
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

// benchPrefetch is the consumer's --prefetch in ConsumerVsBare (-bench-prefetch).
var benchPrefetch = flag.String("bench-prefetch", "20", "the consumer's --prefetch in ConsumerVsBare")
