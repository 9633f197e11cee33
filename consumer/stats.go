package main

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"eaimq/internal/store"
)

// stats counts outcomes for the summary at exit: the store.Outcome the
// consumer acted on, as it is, never re-derived from a status.
type stats struct {
	received  atomic.Int64
	outcomes  [len(outcomeIndex)]atomic.Int64
	ackErrors atomic.Int64
}

// outcomeIndex numbers the outcomes the summary counts.
var outcomeIndex = [...]store.Outcome{
	store.OutDelivered, store.OutDuplicate, store.OutRetry, store.OutRejected,
	store.OutFailed, store.OutNoID, store.OutUnexpected, store.OutUnsendable,
}

func (s *stats) count(o store.Outcome) {
	for i, x := range outcomeIndex {
		if x == o {
			s.outcomes[i].Add(1)
			return
		}
	}
}

func (s *stats) n(o store.Outcome) int64 {
	for i, x := range outcomeIndex {
		if x == o {
			return s.outcomes[i].Load()
		}
	}
	return 0
}

// dead is the number of claims dead-lettered in this run.
func (s *stats) dead() int64 {
	var n int64
	for i, x := range outcomeIndex {
		if x.Action == store.DeadLetter {
			n += s.outcomes[i].Load()
		}
	}
	return n
}

// summary is the line on stdout at exit: what a person or a script reads.
func (s *stats) summary(w io.Writer, elapsed time.Duration) {
	fmt.Fprintf(w, "consumer: %d received: %d delivered, %d duplicates skipped, %d requeued, %d dead-lettered "+
		"(%d rejected by the claim system, %d failed twice, %d without id, %d unexpected status, %d unsendable), %d errors; %.1fs\n",
		s.received.Load(), s.n(store.OutDelivered), s.n(store.OutDuplicate), s.n(store.OutRetry), s.dead(),
		s.n(store.OutRejected), s.n(store.OutFailed), s.n(store.OutNoID), s.n(store.OutUnexpected), s.n(store.OutUnsendable),
		s.ackErrors.Load(), elapsed.Seconds())
}
