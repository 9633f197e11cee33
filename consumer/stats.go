package main

import (
	"eaimq/internal/store"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// stats counts outcomes for the summary at exit.
type stats struct {
	received, delivered, duplicates, requeued atomic.Int64
	deadRejected, deadTransient, deadNoID     atomic.Int64
	ackErrors                                 atomic.Int64
}

func (s *stats) count(outcome string, a answer, reason string) {
	switch outcome {
	case "delivered":
		s.delivered.Add(1)
	case "duplicate":
		s.duplicates.Add(1)
	case "requeued":
		s.requeued.Add(1)
	case "dead-lettered":
		switch {
		case reason == store.ReasonNoID:
			s.deadNoID.Add(1)
		case classify(a.status) == permanent:
			s.deadRejected.Add(1)
		default:
			s.deadTransient.Add(1)
		}
	}
}

// summary is the line on stdout at exit: what a person or a script reads.
func (s *stats) summary(w io.Writer, elapsed time.Duration) {
	dead := s.deadRejected.Load() + s.deadTransient.Load() + s.deadNoID.Load()
	fmt.Fprintf(w, "consumer: %d received: %d delivered, %d duplicates skipped, %d requeued, %d dead-lettered "+
		"(%d rejected by the claim system, %d failed twice, %d without id), %d errors; %.1fs\n",
		s.received.Load(), s.delivered.Load(), s.duplicates.Load(), s.requeued.Load(), dead,
		s.deadRejected.Load(), s.deadTransient.Load(), s.deadNoID.Load(), s.ackErrors.Load(), elapsed.Seconds())
}
