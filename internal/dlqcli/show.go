package dlqcli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"eaimq/internal/dlq"
	"eaimq/internal/fail"
)

// shown is the JSON form of show: the row, the properties, the headers,
// the attempt log and the body, every field on every dead letter (null
// where there is none).
type shown struct {
	Row
	ContentType  string
	DeliveryMode uint8
	Timestamp    time.Time
	AppID        string
	Headers      map[string]any
	History      []AttemptRow
	Body         []byte
}

// MarshalJSON writes the row's fields, then show's own.
func (s shown) MarshalJSON() ([]byte, error) {
	row, err := json.Marshal(s.Row)
	if err != nil {
		return nil, err
	}
	own := struct {
		ContentType  *string        `json:"content_type"`
		DeliveryMode uint8          `json:"delivery_mode"`
		Timestamp    *time.Time     `json:"timestamp"`
		AppID        *string        `json:"app_id"`
		Headers      map[string]any `json:"headers"`
		History      []AttemptRow   `json:"history"`
		Body         *string        `json:"body"`        // a body that is UTF-8
		BodyBase64   []byte         `json:"body_base64"` // one that is not
	}{ContentType: null(s.ContentType), DeliveryMode: s.DeliveryMode, Timestamp: nullTime(s.Timestamp), AppID: null(s.AppID),
		Headers: s.Headers, History: s.History}
	if own.Headers == nil {
		own.Headers = map[string]any{}
	}
	if utf8.Valid(s.Body) {
		b := string(s.Body)
		own.Body = &b
	} else {
		own.BodyBase64 = s.Body
	}
	rest, err := json.Marshal(own)
	if err != nil {
		return nil, err
	}
	// Two objects into one: the row's fields, a comma, show's.
	return append(append(row[:len(row)-1], ','), rest[1:]...), nil
}

// AttemptRow is the JSON form of one attempt of show's history.
type AttemptRow struct {
	At          time.Time `json:"at"`
	Redelivered bool      `json:"redelivered"`
	Status      int       `json:"status"`
	Error       string    `json:"error"` // the answer or the error ("" when none)
	Action      string    `json:"action"`
	Reason      string    `json:"reason"`
	LatencyMS   int64     `json:"latency_ms"`
}

// Show prints the one dead letter c.IDs names on w, in full: properties,
// headers, the attempt history from the store and the body, as text or
// (c.JSON) one JSON object.
func Show(ctx context.Context, b *dlq.Browser, c dlq.Config, w io.Writer) error {
	m, err := dlq.FindOne(ctx, b, c)
	if err != nil {
		return err
	}
	history := []AttemptRow{}
	st := b.Store()
	if st != nil {
		as, err := st.Attempts(ctx, m.Key)
		if err != nil {
			return fail.New(fail.IO, fmt.Errorf("read the attempts of %s from the store %s: %w", dlq.Field(m.Key), st.Path(), err))
		}
		for _, a := range as {
			history = append(history, AttemptRow{At: a.At, Redelivered: a.Redelivered, Status: a.Status, Error: a.Error,
				Action: a.Outcome.Action.String(), Reason: a.Outcome.Reason.String(), LatencyMS: a.Latency.Milliseconds()})
		}
	}
	if c.JSON {
		d := m.Delivery()
		return dlq.WriteJSON(w, shown{Row: toRow(m), ContentType: d.ContentType, DeliveryMode: d.DeliveryMode, Timestamp: d.Timestamp,
			AppID: d.AppId, Headers: d.Headers, History: history, Body: d.Body})
	}
	writeShown(w, m, st != nil, history)
	return nil
}

// writeShown is show's text: every field from the message escaped (and
// clipped), the body's newlines and tabs kept.
func writeShown(w io.Writer, m *dlq.Dead, stored bool, history []AttemptRow) {
	d := m.Delivery()
	fmt.Fprintf(w, "message_id:    %s\n", dlq.Field(d.MessageId))
	if m.Key != d.MessageId {
		fmt.Fprintf(w, "store key:     %s\n", dlq.Field(m.Key))
	}
	ts := "-"
	if !d.Timestamp.IsZero() {
		ts = d.Timestamp.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "claim_id:      %s\ncontent_type:  %s\ndelivery_mode: %d\ntimestamp:     %s\napp_id:        %s\n",
		dlq.Field(m.ClaimID), dlq.Field(d.ContentType), d.DeliveryMode, ts, dlq.Field(d.AppId))
	fmt.Fprintf(w, "headers:\n")
	if len(d.Headers) == 0 {
		fmt.Fprintf(w, "  none\n")
	}
	writeHeaders(w, "  ", d.Headers)
	why := m.Why()
	if m.CrashLoop() {
		why = dlq.CrashLoopWord + ": " + m.CrashSentence(true)
	}
	fmt.Fprintf(w, "reason:        %s\n", dlq.Field(why))
	if e := m.Edit; e != nil {
		at := "-"
		if !e.At.IsZero() {
			at = e.At.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "edited:        %s by %s via %s; replaced a body with sha256 %s\n", at, dlq.Field(dlq.OrDash(e.By)), dlq.Field(dlq.OrDash(e.Via)),
			dlq.Field(dlq.OrDash(e.PreviousSHA256)))
		fmt.Fprintf(w, "idempotency:   %s (the Idempotency-Key the consumer sends for the edited body)\n", dlq.Field(dlq.OrDash(e.IdempotencyKey)))
	}
	if p := m.Purged; p != nil {
		fmt.Fprintf(w, "purged:        %s by %s via %s (in %s; dlq restore %s brings it back)\n", p.At.UTC().Format(time.RFC3339),
			dlq.Field(dlq.OrDash(p.By)), dlq.Field(dlq.OrDash(p.Via)), m.Archive(), dlq.ShellWord(m.Key))
	}
	if p := m.Replaying; p != nil {
		fmt.Fprintf(w, "replaying:     since %s by %s via %s (its copy may be out; dlq replay -force takes it after %s)\n",
			p.At.UTC().Format(time.RFC3339), dlq.Field(dlq.OrDash(p.By)), dlq.Field(dlq.OrDash(p.Via)), dlq.DefaultReplayLease)
	}
	if m.Known {
		fmt.Fprintf(w, "record:        state %s, %d partner call(s), last status %d %s\n", dlq.Field(string(m.Rec.State)), m.Rec.Attempts,
			m.Rec.LastStatus, dlq.Field(m.Rec.LastError))
	}
	if stored {
		fmt.Fprintf(w, "attempts (failures and decisions; a success is the record's last status):\n")
		if len(history) == 0 {
			fmt.Fprintf(w, "  none on record\n")
		}
		for _, a := range history {
			fmt.Fprintf(w, "  %s  redelivered=%-5v status=%-3d action=%-7s reason=%-17s %s %s\n", a.At.UTC().Format(time.RFC3339),
				a.Redelivered, a.Status, a.Action, a.Reason, time.Duration(a.LatencyMS)*time.Millisecond, dlq.Field(a.Error))
		}
	}
	body := d.Body
	fmt.Fprintf(w, "body (%d bytes):\n", len(body))
	if len(body) > dlq.BodyWidth {
		body = body[:dlq.BodyWidth]
	}
	fmt.Fprintf(w, "%s\n", dlq.Esc(string(body), true))
	if len(body) < len(d.Body) {
		fmt.Fprintf(w, "… %d more bytes (dlq -json show prints the whole body)\n", len(d.Body)-len(body))
	}
}
