package relay

import (
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"eaimq/internal/claim"
)

// stats counts outcomes for the summary at exit: the claim.Outcome the
// consumer acted on, as it is, never re-derived from a status.
type stats struct {
	received  atomic.Int64
	outcomes  [len(claim.Outcomes)]atomic.Int64 // by Outcome.Index
	ackErrors atomic.Int64
}

func (s *stats) count(o claim.Outcome) {
	if i := o.Index(); i >= 0 {
		s.outcomes[i].Add(1)
	}
}

func (s *stats) n(o claim.Outcome) int64 {
	if i := o.Index(); i >= 0 {
		return s.outcomes[i].Load()
	}
	return 0
}

// dead is the number of claims dead-lettered in this run.
func (s *stats) dead() int64 {
	var n int64
	for i, x := range claim.Outcomes {
		if x.Action == claim.DeadLetter {
			n += s.outcomes[i].Load()
		}
	}
	return n
}

// Summary is what the run did, counted once and printed as text or JSON
// from the same numbers.
type Summary struct {
	Received     int64   `json:"received"`
	Delivered    int64   `json:"delivered"`
	Duplicates   int64   `json:"duplicates"`
	Requeued     int64   `json:"requeued"`
	DeadLettered int64   `json:"dead_lettered"` // the five below together
	Rejected     int64   `json:"rejected"`
	FailedTwice  int64   `json:"failed_twice"`
	NoID         int64   `json:"no_id"`
	Unexpected   int64   `json:"unexpected_status"`
	Unsendable   int64   `json:"unsendable"`
	Errors       int64   `json:"errors"` // decided but not acted on
	Seconds      float64 `json:"seconds"`
	// With --retry-delays and --pause-when-down only.
	Delayed       int64   `json:"delayed,omitempty"`    // sent to a delay queue, confirmed, acked
	Superseded    int64   `json:"superseded,omitempty"` // copies whose step was carried out already, acked
	PausedSeconds float64 `json:"paused_seconds,omitempty"`
	Pauses        int     `json:"pauses,omitempty"`
	PauseReason   string  `json:"pause_reason,omitempty"` // the last pause's
	// When the dedup store was unavailable and waited out.
	StoreDownSeconds float64 `json:"store_down_seconds,omitempty"`
	StoreOutages     int     `json:"store_outages,omitempty"`
	StoreDownReason  string  `json:"store_down_reason,omitempty"` // the last outage's
}

// settled is the claims this run finished with: delivered, skipped as
// duplicates or as superseded copies, or dead-lettered (a requeued or
// delayed copy comes back).
func (m Summary) settled() int64 { return m.Delivered + m.Duplicates + m.Superseded + m.DeadLettered }

func (s *stats) summary(elapsed time.Duration) Summary {
	return Summary{
		Received:     s.received.Load(),
		Delivered:    s.n(claim.OutDelivered),
		Duplicates:   s.n(claim.OutDuplicate),
		Requeued:     s.n(claim.OutRetry),
		DeadLettered: s.dead(),
		Rejected:     s.n(claim.OutRejected),
		FailedTwice:  s.n(claim.OutFailed),
		NoID:         s.n(claim.OutNoID),
		Unexpected:   s.n(claim.OutUnexpected),
		Unsendable:   s.n(claim.OutUnsendable),
		Errors:       s.ackErrors.Load(),
		Delayed:      s.n(claim.OutDelayed),
		Superseded:   s.n(claim.OutSuperseded),
		Seconds:      elapsed.Round(time.Millisecond).Seconds(),
	}
}

// writeText is the line on stdout at exit: what a person or a script reads.
// The clauses of the new flags appear only when they did something, so
// that the lab's line stays the lab's.
func (m Summary) writeText(w io.Writer) {
	delayed, paused := "", ""
	if m.Delayed > 0 {
		delayed = fmt.Sprintf(", %d sent to delay queues", m.Delayed)
	}
	if m.Superseded > 0 {
		delayed += fmt.Sprintf(", %d superseded copies acked", m.Superseded)
	}
	if m.Pauses > 0 {
		paused = fmt.Sprintf("; paused %.1fs in %d pause(s), the claim system down (%s)", m.PausedSeconds, m.Pauses, m.PauseReason)
	}
	if m.StoreOutages > 0 {
		paused += fmt.Sprintf("; held back %.1fs in %d outage(s) of the dedup store (%s)", m.StoreDownSeconds, m.StoreOutages, m.StoreDownReason)
	}
	fmt.Fprintf(w, "consumer: %d received: %d delivered, %d duplicates skipped, %d requeued%s, %d dead-lettered "+
		"(%d rejected by the claim system, %d failed twice, %d without id, %d unexpected status, %d unsendable), %d errors; %.1fs%s\n",
		m.Received, m.Delivered, m.Duplicates, m.Requeued, delayed, m.DeadLettered,
		m.Rejected, m.FailedTwice, m.NoID, m.Unexpected, m.Unsendable, m.Errors, m.Seconds, paused)
}

// writeJSON is the same summary as one JSON object on one line (-json).
func (m Summary) writeJSON(w io.Writer) {
	b, _ := json.Marshal(m) // plain numbers: cannot fail
	w.Write(append(b, '\n'))
}
