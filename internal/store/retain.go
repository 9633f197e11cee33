package store

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Retention: the consumer's --retain. A delivered claim's record is what
// keeps its redelivered or republished copy from reaching the partner
// twice, so it is kept as long as a copy can plausibly come back (the
// retention period), then deleted with its attempt log. Only done records
// go: a claim in flight, one that failed and waits for its retry, and a
// dead-lettered one (whose reason dlq shows, and whose redelivered copy
// must be rejected again) are never pruned, whatever their age. Each
// backend's Prune walks its table in key order, a batch of keys per
// transaction, so that no transaction holds the store for long.

// PruneBatch is the number of records Retain has Prune look at per
// transaction.
const PruneBatch = 500

// ParseAge reads a retention period: a Go duration ("36h", "90m") or a
// number of days with the suffix d ("90d"). "" and "0" mean keep forever
// (0).
func ParseAge(s string) (time.Duration, error) {
	if s == "" || s == "0" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || !(n > 0 && n <= 36500) {
			return 0, fmt.Errorf("%q: want a number of days from 1 to 36500 (90d) or a duration (36h)", s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("%q: want a number of days (90d) or a duration of at least 1s (36h)", s)
	}
	return d, nil
}

// Retain prunes the records of claims delivered more than age ago, at
// once and then every tenth of age (at least a second, at most an hour),
// until ctx ends, logging what it deleted. The returned channel is closed
// when it has stopped: the caller closes the store after that.
func Retain(ctx context.Context, s Store, age time.Duration, log *slog.Logger) <-chan struct{} {
	stopped := make(chan struct{})
	every := min(max(age/10, time.Second), time.Hour)
	go func() {
		defer close(stopped)
		for {
			n, err := s.Prune(ctx, time.Now().Add(-age), PruneBatch)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				log.Warn("retention: prune failed; trying again later", "err", err)
			case n > 0:
				log.Info("retention: pruned the records of delivered claims", "records", n, "older_than", age.String())
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(every):
			}
		}
	}()
	return stopped
}
