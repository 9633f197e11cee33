package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"
	"unicode/utf8"

	"eaimq/internal/cli"
)

// row is the JSON form of one dead letter.
type row struct {
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

func toRow(m *dead) row {
	r := row{MessageID: m.Key, ClaimID: m.ClaimID, DeadAt: m.DeadAt, FromQueue: m.FromQueue, Broker: m.Broker,
		Count: m.Count, Reason: m.reason().String(), DeadReason: m.sentence(), Recorded: m.Known,
		OurReason: m.ourReason(), Replays: m.Replays}
	if m.Known {
		r.State, r.Status, r.Excerpt, r.Attempts = string(m.Rec.State), m.Rec.LastStatus, m.Rec.LastError, m.Rec.Attempts
	}
	return r
}

const tableFormat = "%-38s %-14s %-19s %-9s %-14s %-8s %s\n"

func list(ctx context.Context, b *browser, o *options, w, stderr io.Writer) error {
	n := 0
	if !o.json {
		fmt.Fprintf(w, tableFormat, "MESSAGE_ID", "CLAIM_ID", "DEAD-LETTERED (UTC)", "FROM", "BROKER", "ATTEMPTS", "REASON")
	}
	err := b.walk(ctx, o.limit, func(m *dead) (bool, error) {
		if !o.selects(m) {
			return true, nil
		}
		n++
		r := toRow(m)
		if o.json {
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
		more = fmt.Sprintf("; %d more in claim.dead not looked at (-limit %d)", u, o.limit)
		if o.json {
			fmt.Fprintf(stderr, "dlq: %d more dead letter(s) in claim.dead not looked at (-limit %d)\n", u, o.limit)
		}
	}
	if !o.json {
		fmt.Fprintf(w, "%d dead letter(s) listed of %d looked at%s; claim.dead keeps them all\n", n, b.looked, more)
	}
	return nil
}

// shown is the JSON form of show: the row, the properties, the headers,
// the attempt log and the body.
type shown struct {
	row
	ContentType  string         `json:"content_type,omitempty"`
	DeliveryMode uint8          `json:"delivery_mode"`
	Timestamp    time.Time      `json:"timestamp,omitzero"`
	AppID        string         `json:"app_id,omitempty"`
	Headers      map[string]any `json:"headers,omitempty"`
	History      []attemptRow   `json:"history"`
	Body         string         `json:"body,omitempty"`
	BodyBase64   []byte         `json:"body_base64,omitempty"` // a body that is not UTF-8
}

type attemptRow struct {
	At          time.Time `json:"at"`
	Redelivered bool      `json:"redelivered"`
	Status      int       `json:"status"`
	Error       string    `json:"error,omitempty"`
	Action      string    `json:"action"`
	Reason      string    `json:"reason"`
	LatencyMS   int64     `json:"latency_ms"`
}

func show(ctx context.Context, b *browser, o *options, w io.Writer) error {
	var found *dead
	err := b.walk(ctx, o.limit, func(m *dead) (bool, error) {
		if o.selects(m) {
			found = m
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	if found == nil {
		return cli.Exitf(cli.ExitFailure, "no dead letter with id %q in claim.dead%s", clip(esc(o.ids[0], false), fieldWidth), b.beyond())
	}
	m, d := found, found.d
	history := []attemptRow{}
	if b.store != nil {
		as, err := b.store.Attempts(ctx, m.Key)
		if err != nil {
			return cli.Exit(cli.ExitIOErr, fmt.Errorf("read the attempts of %s from the store %s: %w", field(m.Key), b.store.Path(), err))
		}
		for _, a := range as {
			history = append(history, attemptRow{At: a.At, Redelivered: a.Redelivered, Status: a.Status, Error: a.Error,
				Action: a.Outcome.Action.String(), Reason: a.Outcome.Reason.String(), LatencyMS: a.Latency.Milliseconds()})
		}
	}

	if o.json {
		s := shown{row: toRow(m), ContentType: d.ContentType, DeliveryMode: d.DeliveryMode, Timestamp: d.Timestamp,
			AppID: d.AppId, Headers: d.Headers, History: history}
		if utf8.Valid(d.Body) {
			s.Body = string(d.Body)
		} else {
			s.BodyBase64 = d.Body
		}
		return writeJSON(w, s)
	}

	fmt.Fprintf(w, "message_id:    %s\n", field(d.MessageId))
	if m.Key != d.MessageId {
		fmt.Fprintf(w, "store key:     %s\n", field(m.Key))
	}
	ts := "-"
	if !d.Timestamp.IsZero() {
		ts = d.Timestamp.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "claim_id:      %s\ncontent_type:  %s\ndelivery_mode: %d\ntimestamp:     %s\napp_id:        %s\n",
		field(m.ClaimID), field(d.ContentType), d.DeliveryMode, ts, field(d.AppId))
	fmt.Fprintf(w, "headers:\n")
	if len(d.Headers) == 0 {
		fmt.Fprintf(w, "  none\n")
	}
	writeHeaders(w, "  ", d.Headers)
	fmt.Fprintf(w, "reason:        %s\n", field(m.why()))
	if m.Known {
		fmt.Fprintf(w, "record:        state %s, %d partner call(s), last status %d %s\n", field(string(m.Rec.State)), m.Rec.Attempts,
			m.Rec.LastStatus, field(m.Rec.LastError))
	}
	if b.store != nil {
		fmt.Fprintf(w, "attempts (failures and decisions; a success is the record's last status):\n")
		if len(history) == 0 {
			fmt.Fprintf(w, "  none on record\n")
		}
		for _, a := range history {
			fmt.Fprintf(w, "  %s  redelivered=%-5v status=%-3d action=%-7s reason=%-17s %s %s\n", a.At.UTC().Format(time.RFC3339),
				a.Redelivered, a.Status, a.Action, a.Reason, time.Duration(a.LatencyMS)*time.Millisecond, field(a.Error))
		}
	}
	body := d.Body
	fmt.Fprintf(w, "body (%d bytes):\n", len(body))
	if len(body) > bodyWidth {
		body = body[:bodyWidth]
	}
	fmt.Fprintf(w, "%s\n", esc(string(body), true))
	if len(body) < len(d.Body) {
		fmt.Fprintf(w, "… %d more bytes (dlq -json show prints the whole body)\n", len(d.Body)-len(body))
	}
	return nil
}

func purge(ctx context.Context, b *browser, o *options, w, stderr io.Writer) error {
	n, err := purgeDead(ctx, b, selection{o.limit, o.selects}, o.yes, func(key string) {
		if o.yes {
			fmt.Fprintf(w, "deleted %s\n", field(key))
		} else {
			fmt.Fprintf(w, "would delete %s\n", field(key))
		}
	})
	if err != nil {
		if o.yes {
			fmt.Fprintf(w, "purged %d dead letter(s) before the error\n", n)
		}
		return err
	}
	missing := o.missing(stderr, b)
	if !o.yes {
		return cli.Usagef("purge would delete %d dead letter(s); add -yes to delete them", n)
	}
	fmt.Fprintf(w, "purged %d dead letter(s)\n", n)
	if missing > 0 {
		return cli.Exitf(cli.ExitFailure, "%d named ID(s) not in claim.dead", missing)
	}
	return nil
}

// purgeDead deletes the selected dead letters (with yes; without, it only
// names them) and calls deleted with each key. It is the one purge of this
// program: dlq purge and dlq serve's purge go through it.
func purgeDead(ctx context.Context, b *browser, sel selection, yes bool, deleted func(key string)) (int, error) {
	n := 0
	err := b.walk(ctx, sel.limit, func(m *dead) (bool, error) {
		if !sel.selects(m) {
			return true, nil
		}
		if yes {
			// Acking a dead letter is deleting it.
			if err := m.d.Ack(false); err != nil {
				return false, cli.Exit(cli.ExitUnavailable, fmt.Errorf("ack %s: %w", field(m.Key), err))
			}
		}
		deleted(m.Key)
		n++
		return true, nil
	})
	return n, err
}
