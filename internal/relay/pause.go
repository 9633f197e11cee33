package relay

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"eaimq/internal/metrics"
	"eaimq/internal/partner"
)

// pauser stops the consumer from burning claims into the DLQ while the
// claim system is down (--pause-when-down). After `after` calls in a row
// got no answer at all (connection refused, reset, timeout), it closes: no
// worker starts a call, so the workers hold at most --prefetch deliveries
// unacked and the broker sends no more; every other claim stays in
// claim.in. One goroutine probes the claim system with backoff, and the
// first HTTP answer of any status (it is up, whatever it thinks of a GET)
// opens it again. A nil *pauser never pauses.
type pauser struct {
	after   int
	probe   func(context.Context) error
	log     *slog.Logger
	metrics *metrics.Consumer

	mu      sync.Mutex
	downs   int           // calls in a row without an answer
	open    chan struct{} // closed while not paused; replaced when paused
	since   time.Time
	total   time.Duration
	pauses  int
	why     string // the last pause's cause
	probing bool
}

func newPauser(after int, probe func(context.Context) error, log *slog.Logger, m *metrics.Consumer) *pauser {
	open := make(chan struct{})
	close(open)
	return &pauser{after: after, probe: probe, log: log, metrics: m, open: open}
}

// wait returns at once when not paused, or when the pause ends; false
// when ctx ended first.
func (p *pauser) wait(ctx context.Context) bool {
	if p == nil {
		return true
	}
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-ctx.Done():
		return false
	}
}

// note counts one call's answer; a run of `after` calls without one
// pauses, and starts the probe (bounded by ctx, the run).
func (p *pauser) note(ctx context.Context, a partner.Answer) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if a.Status != 0 {
		p.downs = 0
		return
	}
	p.downs++
	if p.downs < p.after || p.probing {
		return
	}
	p.probing = true
	p.open = make(chan struct{})
	p.since = time.Now()
	p.pauses++
	p.why = fmt.Sprintf("%d calls in a row without an answer, the last: %s", p.downs, a.Excerpt)
	p.log.Warn("claim system down: pausing (claims stay in claim.in; probing until it answers)", "why", p.why)
	p.metrics.Paused()
	go p.probeUntilUp(ctx)
}

// probeUntilUp probes with backoff from 250 ms to 5 s until the claim
// system answers or the run ends, then resumes.
func (p *pauser) probeUntilUp(ctx context.Context) {
	backoff := 250 * time.Millisecond
	for {
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			p.resume("the run ended")
			return
		}
		if err := p.probe(ctx); err == nil {
			p.resume("the claim system answers")
			return
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (p *pauser) resume(why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := time.Since(p.since)
	p.total += d
	p.downs, p.probing = 0, false
	close(p.open)
	p.metrics.Resumed(d)
	p.log.Info("resuming: "+why, "paused", d.Round(time.Millisecond))
}

// paused reports whether a pause is on now.
func (p *pauser) paused() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probing
}

// report is the pauses so far, for the summary: the time (a pause still on
// counts up to now), how many, and the last one's cause.
func (p *pauser) report() (time.Duration, int, string) {
	if p == nil {
		return 0, 0, ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.total
	if p.probing {
		t += time.Since(p.since)
	}
	return t, p.pauses, p.why
}
