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
// got no answer at all (connection refused, reset, timeout), its gate
// shuts: no worker starts a call, so the workers hold at most --prefetch
// deliveries unacked and the broker sends no more; every other claim stays
// in claim.in. The gate probes the claim system with backoff, and the
// first HTTP answer of any status (it is up, whatever it thinks of a GET)
// opens it again. A nil *pauser never pauses.
type pauser struct {
	after   int
	log     *slog.Logger
	metrics *metrics.Consumer
	gate    *gate

	mu    sync.Mutex
	downs int // calls in a row without an answer
}

func newPauser(after int, probe func(context.Context) error, log *slog.Logger, m *metrics.Consumer) *pauser {
	p := &pauser{after: after, log: log, metrics: m, gate: newGate(probe)}
	p.gate.onOpen = func(d time.Duration) {
		p.mu.Lock()
		p.downs = 0
		p.mu.Unlock()
		m.Resumed(d)
		log.Info("resuming: the claim system answers", "paused", d.Round(time.Millisecond))
	}
	return p
}

// wait returns at once when not paused, or when the pause ends; false
// when ctx ended first.
func (p *pauser) wait(ctx context.Context) bool {
	return p == nil || p.gate.waitOpen(ctx)
}

// note counts one call's answer; a run of `after` calls without one
// pauses, and starts the probe (bounded by ctx, the run).
func (p *pauser) note(ctx context.Context, a partner.Answer) {
	if p == nil {
		return
	}
	p.mu.Lock()
	if a.Status != 0 {
		p.downs = 0
	} else {
		p.downs++
	}
	downs := p.downs
	p.mu.Unlock()
	if downs < p.after {
		return
	}
	why := fmt.Sprintf("%d calls in a row without an answer, the last: %s", downs, a.Excerpt)
	if p.gate.shut(ctx, why) {
		p.log.Warn("claim system down: pausing (claims stay in claim.in; probing until it answers)", "why", why)
		p.metrics.Paused()
	}
}

// paused reports whether a pause is on now.
func (p *pauser) paused() bool {
	if p == nil {
		return false
	}
	down, _ := p.gate.isShut()
	return down
}

// report is the pauses so far, for the summary: the time (a pause still on
// counts up to now), how many, and the last one's cause.
func (p *pauser) report() (time.Duration, int, string) {
	if p == nil {
		return 0, 0, ""
	}
	return p.gate.report()
}
