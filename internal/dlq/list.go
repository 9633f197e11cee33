package dlq

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Row is the JSON form of one dead letter: one line of list -json, and the
// first fields of show -json.
type Row struct {
	MessageID  string    `json:"message_id"`
	ClaimID    string    `json:"claim_id,omitempty"`
	DeadAt     time.Time `json:"dead_lettered_at,omitzero"`
	FromQueue  string    `json:"from_queue,omitempty"`
	Broker     string    `json:"broker_reason,omitempty"`
	Count      int64     `json:"broker_count"`
	Reason     string    `json:"reason"`      // the reason's word, as recorded
	DeadReason string    `json:"dead_reason"` // the recorded sentence
	Recorded   bool      `json:"recorded"`    // the store has a record
	State      string    `json:"state,omitempty"`
	Status     int       `json:"status,omitempty"`
	Excerpt    string    `json:"excerpt,omitempty"`
	Attempts   int       `json:"attempts"`
	OurReason  string    `json:"our_reason"`
	Replays    int64     `json:"replays,omitempty"`
}

func toRow(m *dead) Row {
	r := Row{MessageID: m.Key, ClaimID: m.ClaimID, DeadAt: m.DeadAt, FromQueue: m.FromQueue, Broker: m.Broker,
		Count: m.Count, Reason: m.reason().String(), DeadReason: m.sentence(), Recorded: m.Known,
		OurReason: m.ourReason(), Replays: m.Replays}
	if m.Known {
		r.State, r.Status, r.Excerpt, r.Attempts = string(m.Rec.State), m.Rec.LastStatus, m.Rec.LastError, m.Rec.Attempts
	}
	return r
}

const tableFormat = "%-38s %-14s %-19s %-9s %-14s %-8s %s\n"

// List prints the selected dead letters on w, as a table or (c.JSON) one
// JSON object a line, and consumes nothing.
func List(ctx context.Context, b *Browser, c Config, w, stderr io.Writer) error {
	f := newFilter(c)
	n := 0
	if !c.JSON {
		fmt.Fprintf(w, tableFormat, "MESSAGE_ID", "CLAIM_ID", "DEAD-LETTERED (UTC)", "FROM", "BROKER", "ATTEMPTS", "REASON")
	}
	err := b.walk(ctx, c.Limit, func(m *dead) (bool, error) {
		if !f.selects(m) {
			return true, nil
		}
		n++
		r := toRow(m)
		if c.JSON {
			return true, writeJSON(w, r)
		}
		when := "-"
		if !r.DeadAt.IsZero() {
			when = r.DeadAt.UTC().Format("2006-01-02 15:04:05")
		}
		from, brk := r.FromQueue, "-"
		if r.Broker != "" || r.Count != 0 {
			brk = fmt.Sprintf("%s x%d", r.Broker, r.Count)
		}
		if from == "" {
			from = "-"
		}
		attempts := "-"
		if m.Known {
			attempts = strconv.Itoa(r.Attempts)
		}
		fmt.Fprintf(w, tableFormat, cell(r.MessageID, 38), cell(r.ClaimID, 14), when,
			cell(from, 9), cell(brk, 14), attempts, cell(m.why(), 100))
		return true, nil
	})
	if err != nil {
		return err
	}
	more := ""
	if u := b.unlooked(); u > 0 {
		more = fmt.Sprintf("; %d more in claim.dead not looked at (-limit %d)", u, c.Limit)
		if c.JSON {
			fmt.Fprintf(stderr, "dlq: %d more dead letter(s) in claim.dead not looked at (-limit %d)\n", u, c.Limit)
		}
	}
	if !c.JSON {
		fmt.Fprintf(w, "%d dead letter(s) listed of %d looked at%s; claim.dead keeps them all\n", n, b.looked, more)
	}
	return nil
}
