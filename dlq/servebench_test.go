package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/store"
)

// BenchmarkDLQServeGroups measures dlq serve's groups page over 100,000
// dead letters (made as BenchmarkDLQListRSS makes them, on a private node
// of its own): the time to the first byte of the first load (a walk of
// claim.dead), of a reload (the groups kept: no walk), and of "Count again
// now" (a walk); the broker's resident memory before and at its peak
// during the first walk, against its watermark; and dlq serve's own
// resident memory at its peak. It fails unless the page counts the
// 100,000 in one group.
//
//	go test -run '^$' -bench DLQServeGroups -benchtime 1x ./dlq
func BenchmarkDLQServeGroups(b *testing.B) {
	const node, port = "eaimqdlqserve@localhost", 5695
	vh, db := hundredThousand(b, node, port)

	mem := brokerMemory(b, node)
	var cold, kept, again time.Duration
	var before, peak, servePeak int64
	for b.Loop() {
		base, pid, stop := startServe(b, broker.EnvURL+"="+vh.URL, store.EnvPath+"="+db)
		self := &memSampler{pid: pid}
		self.start()
		before = mem.now()
		mem.start()
		ttfb, page := get(b, base+"/")
		peak = max(peak, mem.stop())
		cold += ttfb
		if !strings.Contains(page, fmt.Sprintf(`<span class="count">%d</span> rejected · 422`, rssDead)) {
			b.Fatalf("the first load does not count %d rejected:\n%.2000s", rssDead, page)
		}
		ttfb, page = get(b, base+"/")
		kept += ttfb
		if !strings.Contains(page, "(kept:") {
			b.Fatalf("the reload walked again:\n%.2000s", page)
		}
		ttfb, _ = get(b, base+"/?refresh=1")
		again += ttfb
		servePeak = max(servePeak, self.stop())
		stop()
	}
	n := float64(b.N)
	b.ReportMetric(cold.Seconds()/n, "s-ttfb-first")
	b.ReportMetric(float64(kept.Microseconds())/1000/n, "ms-ttfb-reload")
	b.ReportMetric(again.Seconds()/n, "s-ttfb-count-again")
	b.ReportMetric(float64(servePeak)/(1<<20), "MiB-serve-RSS")
	mem.report(b, before, peak)
}

// startServe starts the dlq binary's serve on a free loopback port with
// env, and returns its address, its pid and how to stop it.
func startServe(b *testing.B, env ...string) (string, int, func()) {
	b.Helper()
	// -max-held 0: the page's walk as it was before the bound, which is
	// what this figure has measured since issue 24.
	cmd := exec.Command(brokertest.Binary(b, "eaimq/dlq"), "serve", "-addr", "127.0.0.1:0", "-refresh", "0", "-max-held", "0")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	m := regexp.MustCompile(`serving (http://\S+?)/`).FindStringSubmatch(line)
	if err != nil || m == nil {
		cmd.Process.Kill()
		b.Fatalf("dlq serve printed %q: %v", line, err)
	}
	go io.Copy(io.Discard, out)
	return m[1], cmd.Process.Pid, func() {
		cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			b.Errorf("dlq serve: %v", err)
		}
	}
}

// get fetches url and returns the time to its first byte and the page.
func get(b *testing.B, url string) (time.Duration, string) {
	b.Helper()
	var t0, first time.Time
	req, _ := http.NewRequest("GET", url, nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotFirstResponseByte: func() { first = time.Now() },
	}))
	t0 = time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("GET %s: %d %v\n%.2000s", url, resp.StatusCode, err, body)
	}
	return first.Sub(t0), string(body)
}
