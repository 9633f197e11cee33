package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/cli"
	"eaimq/internal/relay"
	"eaimq/internal/store"
)

// harness is one test's world: a temporary vhost with the topology, the
// stand-in claim system over HTTP, and a dedup store file.
type harness struct {
	t       testing.TB
	vh      *brokertest.VHost
	partner *claimsys.Server
	url     string
	db      string
	hooks   relay.Hooks // the consumers this harness starts step in here
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	vh := brokertest.New(t)
	vh.Topology(t)
	p := claimsys.New()
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return &harness{t: t, vh: vh, partner: p, url: srv.URL, db: filepath.Join(t.TempDir(), "processed.db")}
}

func (h *harness) getenv() func(string) string {
	return h.vh.Getenv(map[string]string{store.EnvPath: h.db})
}

// consumer is a run of the consumer in this process.
type consumer struct {
	stop   context.CancelFunc // the first signal
	kill   context.CancelFunc // the second
	done   chan struct{}
	code   int
	stdout bytes.Buffer
	stderr brokertest.Buffer
}

// start runs the consumer with args (besides --claim) until stopped.
func (h *harness) start(args ...string) *consumer {
	hard, kill := context.WithCancel(context.Background())
	soft, stop := context.WithCancel(hard)
	c := &consumer{stop: stop, kill: kill, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		err := runHooked(h.hooks, soft, hard, append([]string{"--claim", h.url}, args...), h.getenv(), &c.stdout, &c.stderr)
		cli.Report(&c.stderr, "consumer", err)
		c.code = cli.Code(err)
	}()
	h.t.Cleanup(func() { kill(); <-c.done })
	return c
}

// wait stops the consumer (as SIGINT would) and waits for it to exit.
func (c *consumer) wait(t testing.TB) {
	t.Helper()
	c.stop()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatal("consumer did not exit within 30s of the stop")
	}
}

// runUntil runs a consumer until cond holds (or fails the test), then
// stops it gracefully and returns it.
func (h *harness) runUntil(what string, cond func() bool, args ...string) *consumer {
	h.t.Helper()
	c := h.start(args...)
	brokertest.Eventually(h.t, 30*time.Second, what, func() bool {
		select {
		case <-c.done:
			h.t.Fatalf("consumer exited early with %d:\n%s", c.code, c.stderr.String())
		default:
		}
		return cond()
	})
	c.wait(h.t)
	return c
}

// assertQueues: brokertest's AssertQueues on this harness's vhost.
func (h *harness) assertQueues(in, unacked, dead int) {
	h.t.Helper()
	h.vh.AssertQueues(h.t, in, unacked, dead)
}

func (h *harness) drained() bool { return h.vh.Drained(h.t) }

func (h *harness) calls(guid string) int { return h.partner.Stats().ByGuid[guid] }

func (h *harness) totalCalls() int { return h.partner.Stats().Total }

func claimsysDelay(ms int) claimsys.Control { return claimsys.Control{DelayMS: &ms} }

func resetControl() claimsys.Control { return claimsys.Control{Reset: true} }
