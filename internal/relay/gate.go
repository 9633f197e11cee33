package relay

import (
	"context"
	"sync"
	"time"
)

// gate holds the workers back while something they need is down: the
// claim system (pause.go) or the dedup store (store.go). Shutting it
// starts one goroutine that probes with backoff (250 ms doubling to 5 s)
// until the probe succeeds, and then opens it again. It keeps how long
// and how often it was shut, and why, for the summary and /readyz.
type gate struct {
	probe func(context.Context) error
	// onGiveUp, when set, is called once the gate has been shut for
	// giveUpAfter: the probing stops there, and the gate stays shut.
	giveUpAfter time.Duration
	onGiveUp    func(why string)
	onOpen      func(shut time.Duration) // after it opens again

	mu        sync.Mutex
	whileOpen chan struct{} // closed while the gate is open; a new one each time it shuts
	whileShut chan struct{} // closed while the gate is shut; a new one each time it opens
	shutNow   bool
	shutAt    time.Time
	shutTotal time.Duration // the shuts that ended
	shuts     int
	why       string // the last shut's cause
}

func newGate(probe func(context.Context) error) *gate {
	open := make(chan struct{})
	close(open)
	return &gate{probe: probe, whileOpen: open, whileShut: make(chan struct{})}
}

// shut shuts the gate for why, and starts probing (bounded by ctx, the
// run) unless it is shut already. It reports whether this call shut it,
// so that only the first caller logs it.
func (g *gate) shut(ctx context.Context, why string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shutNow {
		return false
	}
	g.shutNow, g.shutAt, g.why = true, time.Now(), why
	g.shuts++
	g.whileOpen = make(chan struct{})
	close(g.whileShut)
	go g.probeUntilUp(ctx)
	return true
}

// probeUntilUp probes until the probe succeeds, ctx ends or giveUpAfter
// has passed.
func (g *gate) probeUntilUp(ctx context.Context) {
	backoff := 250 * time.Millisecond
	for {
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		if g.probe(ctx) == nil {
			g.open()
			return
		}
		g.mu.Lock()
		over, why := g.giveUpAfter > 0 && time.Since(g.shutAt) >= g.giveUpAfter, g.why
		g.mu.Unlock()
		if over && g.onGiveUp != nil {
			g.onGiveUp(why)
			return
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// open opens the gate again, after a probe succeeded.
func (g *gate) open() {
	g.mu.Lock()
	d := time.Since(g.shutAt)
	g.shutTotal += d
	g.shutNow = false
	close(g.whileOpen)
	g.whileShut = make(chan struct{})
	onOpen := g.onOpen
	g.mu.Unlock()
	if onOpen != nil {
		onOpen(d)
	}
}

// waitOpen returns true at once when the gate is open, or when it opens;
// false when ctx ended first.
func (g *gate) waitOpen(ctx context.Context) bool {
	select {
	case <-g.whenOpen():
		return true
	case <-ctx.Done():
		return false
	}
}

// whenOpen is closed once the gate is open (at once when it is). Read it
// again after each wake: each shut makes a new one.
func (g *gate) whenOpen() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.whileOpen
}

// whenShut is closed once the gate is shut: what a loop selects on to
// notice it shutting (read it again after each wake).
func (g *gate) whenShut() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.whileShut
}

// isShut reports whether the gate is shut now, and why.
func (g *gate) isShut() (bool, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.shutNow, g.why
}

// report is the shuts so far: the time (a shut still on counts up to
// now), how many, and the last one's cause.
func (g *gate) report() (time.Duration, int, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.shutTotal
	if g.shutNow {
		t += time.Since(g.shutAt)
	}
	return t, g.shuts, g.why
}
