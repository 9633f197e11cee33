package relay

import (
	"context"
	"sync"
	"time"
)

// gate holds the workers back while something they need is down. Closing
// it starts one goroutine that probes with backoff (250 ms doubling to
// 5 s) until the probe succeeds, and then opens it again. It keeps how long
// and how often it was closed, and why, for the summary and /readyz.
type gate struct {
	probe func(context.Context) error
	// giveUp, when set, is called once the gate has been closed for
	// limit: the probing stops there, the gate stays closed.
	limit  time.Duration
	giveUp func(why string)
	opened func(down time.Duration) // after it opens again

	mu     sync.Mutex
	open   chan struct{} // closed while open; replaced when it closes
	shut   chan struct{} // closed while closed; replaced when it opens
	down   bool
	since  time.Time
	total  time.Duration
	closes int
	why    string // the last closing's cause
}

func newGate(probe func(context.Context) error) *gate {
	open := make(chan struct{})
	close(open)
	return &gate{probe: probe, open: open, shut: make(chan struct{})}
}

// close closes the gate for why, and starts probing (bounded by ctx, the
// run) unless it is closed already. It reports whether this call closed it.
func (g *gate) close(ctx context.Context, why string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.down {
		return false
	}
	g.down, g.since, g.why = true, time.Now(), why
	g.closes++
	g.open = make(chan struct{})
	close(g.shut)
	go g.probeUntilUp(ctx)
	return true
}

// probeUntilUp probes until the probe succeeds, ctx ends or the limit is
// reached.
func (g *gate) probeUntilUp(ctx context.Context) {
	backoff := 250 * time.Millisecond
	for {
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		if g.probe(ctx) == nil {
			g.reopen()
			return
		}
		g.mu.Lock()
		over, why := g.limit > 0 && time.Since(g.since) >= g.limit, g.why
		g.mu.Unlock()
		if over && g.giveUp != nil {
			g.giveUp(why)
			return
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (g *gate) reopen() {
	g.mu.Lock()
	d := time.Since(g.since)
	g.total += d
	g.down = false
	close(g.open)
	g.shut = make(chan struct{})
	opened := g.opened
	g.mu.Unlock()
	if opened != nil {
		opened(d)
	}
}

// wait returns true at once when the gate is open, or when it opens; false
// when ctx ended first.
func (g *gate) wait(ctx context.Context) bool {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return true
	case <-ctx.Done():
		return false
	}
}

// opens is closed once the gate is open (at once when it is).
func (g *gate) opens() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// closed is closed while the gate is: what a loop selects on to notice it
// closing (read it again after each wake).
func (g *gate) closed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.shut
}

// isDown reports whether the gate is closed now, and why.
func (g *gate) isDown() (bool, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.down, g.why
}

// report is the closings so far: the time (a closing still on counts up
// to now), how many, and the last one's cause.
func (g *gate) report() (time.Duration, int, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.total
	if g.down {
		t += time.Since(g.since)
	}
	return t, g.closes, g.why
}
