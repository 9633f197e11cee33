package relay

import (
	"context"
	"sync"
	"time"
)

// inFlight lets one worker at a time work on a message_id in this process.
type inFlight struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func (f *inFlight) acquire(ctx context.Context, id string) (release func(), ok bool) {
	for {
		f.mu.Lock()
		if f.m == nil {
			f.m = make(map[string]chan struct{})
		}
		wait, busy := f.m[id]
		if !busy {
			done := make(chan struct{})
			f.m[id] = done
			f.mu.Unlock()
			return func() {
				f.mu.Lock()
				delete(f.m, id)
				f.mu.Unlock()
				close(done)
			}, true
		}
		f.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// waitAtMost waits for wg, or for d.
func waitAtMost(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// waitUnlessForced waits for wg unless the hard stop (the second signal)
// comes first.
func waitUnlessForced(hard context.Context, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-hard.Done():
	}
}
