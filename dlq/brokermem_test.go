package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"eaimq/internal/rabbitctl"
)

// memSampler reads a private node's resident memory from /proc while dlq
// walks claim.dead: what the broker's memory alarm compares with its
// watermark (vm_memory_high_watermark, computed against the process's RSS
// on Linux). /proc costs the two shared cores nothing, where a rabbitmqctl
// a sample would start an Erlang VM each time.
type memSampler struct {
	pid   int
	limit int64 // the watermark, bytes

	mu   sync.Mutex
	peak int64
	done chan struct{}
	wg   sync.WaitGroup
}

func brokerMemory(b *testing.B, node string) *memSampler {
	b.Helper()
	ctl := rabbitctl.Ctl{Node: node}
	out, err := ctl.Run(context.Background(), "-q", "eval", `io:format("~s ~p~n", [os:getpid(), vm_memory_monitor:get_memory_limit()]).`)
	f := strings.Fields(string(out))
	if err != nil || len(f) < 2 {
		b.Fatalf("the broker's pid and watermark: %v %q", err, out)
	}
	m := &memSampler{}
	m.pid, _ = strconv.Atoi(f[0])
	m.limit, _ = strconv.ParseInt(f[1], 10, 64)
	if m.pid == 0 || m.limit == 0 || m.now() == 0 {
		b.Fatalf("the broker's pid and watermark: %q", out)
	}
	return m
}

// now is the broker's resident memory, bytes.
func (m *memSampler) now() int64 {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(s), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpu is the CPU time the broker has taken, user and system (/proc's
// stat, in clock ticks of 10 ms).
func (m *memSampler) cpu() time.Duration {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.pid))
	if err != nil {
		return 0
	}
	// The fields after the command's name, which is in parentheses and
	// may hold spaces: utime and stime are the 14th and 15th of the line.
	f := strings.Fields(string(s[strings.LastIndexByte(string(s), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond
}

func (m *memSampler) start() {
	m.peak, m.done = m.now(), make(chan struct{})
	m.wg.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-m.done:
				return
			case <-t.C:
				n := m.now()
				m.mu.Lock()
				m.peak = max(m.peak, n)
				m.mu.Unlock()
			}
		}
	})
}

// stop ends the sampling and returns the peak.
func (m *memSampler) stop() int64 {
	close(m.done)
	m.wg.Wait()
	return max(m.peak, m.now())
}

// report reports the broker's memory before the walk and at its peak, in
// MiB and as a share of the watermark.
func (m *memSampler) report(b *testing.B, before, peak int64) {
	b.ReportMetric(float64(before)/(1<<20), "MiB-broker-before")
	b.ReportMetric(float64(peak)/(1<<20), "MiB-broker-peak")
	b.ReportMetric(float64(m.limit)/(1<<20), "MiB-broker-watermark")
	b.ReportMetric(float64(peak)/float64(m.limit), "broker-peak/watermark")
}
