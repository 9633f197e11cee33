package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// BenchmarkConsumerMetricsCost drains N preloaded claims to an instant
// partner (where the consumer's own CPU is the limit, so any cost shows)
// with --metrics-addr, scraped every second as a Prometheus would (more
// often than the usual 15 s), and without, alternating which goes first
// in each round, in the same run on the same broker. It reports the drain
// rate with metrics ÷ without (the target: ≥ 0.97).
//
//	go test -run '^$' -bench ConsumerMetricsCost -benchtime 3x ./consumer
func BenchmarkConsumerMetricsCost(b *testing.B) {
	const n = 3000
	h := newHarness(b)
	var with, without time.Duration
	round := 0
	for b.Loop() {
		round++
		for i := range 2 {
			h.partner.Set(resetControl())
			preload(b, h, fmt.Sprintf("m%d-%d", round, i), n)
			if (round+i)%2 == 0 {
				without += consumeAll(b, h, n, "--prefetch", "20")
				continue
			}
			addr := freeAddr(b)
			stop := scrapeEvery(fmt.Sprintf("http://%s/metrics", addr), time.Second)
			with += consumeAll(b, h, n, "--prefetch", "20", "--metrics-addr", addr)
			stop()
		}
	}
	b.ReportMetric(without.Seconds()/with.Seconds(), "with/without")
	b.ReportMetric(float64(n*b.N)/with.Seconds(), "claims/s-with")
	b.ReportMetric(float64(n*b.N)/without.Seconds(), "claims/s-without")
}

func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// scrapeEvery GETs url every d until stopped.
func scrapeEvery(url string, d time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if resp, err := http.Get(url); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}
	}()
	return func() { close(done) }
}
