package dlqweb

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/audit"
	"eaimq/internal/claim"
	"eaimq/internal/dlq"
	"eaimq/internal/fail"
	"eaimq/internal/partner"
)

// describe is the claim page of m: every field escaped as show escapes it,
// the body formatted when it is JSON, the store's attempts.
func (w *web) describe(ctx context.Context, m *dlq.Dead) (Claim, error) {
	d := m.Delivery()
	c := Claim{Ref: ref(m), Why: m.Why()}
	c.GroupID, _, _ = groupOf(m)
	if m.Known {
		c.Record = fmt.Sprintf("state %s, %d partner call(s), last status %d %s", dlq.Field(string(m.Rec.State)), m.Rec.Attempts,
			m.Rec.LastStatus, dlq.Field(m.Rec.LastError))
	}
	ts := "-"
	if !d.Timestamp.IsZero() {
		ts = d.Timestamp.UTC().Format(time.RFC3339)
	}
	c.Properties = []Field{
		{Name: "message_id", Value: dlq.Field(d.MessageId)}, {Name: "store key", Value: dlq.Field(m.Key)},
		{Name: "content_type", Value: dlq.Field(d.ContentType)}, {Name: "delivery_mode", Value: fmt.Sprint(d.DeliveryMode)},
		{Name: "timestamp", Value: ts}, {Name: "app_id", Value: dlq.Field(d.AppId)},
		{Name: "correlation_id", Value: dlq.Field(d.CorrelationId)},
	}
	for k, v := range d.Headers {
		switch k {
		case "x-death":
			c.XDeath = fields(c.XDeath, 0, "", v)
		case partner.EditedHeader:
			if t, ok := v.(amqp.Table); ok {
				c.Edit = tableFields(nil, 0, t)
			}
		}
	}
	// x-death and the edit header have their own sections.
	rest := amqp.Table{}
	for k, v := range d.Headers {
		if k != "x-death" && k != partner.EditedHeader {
			rest[k] = v
		}
	}
	c.Headers = tableFields(nil, 0, rest)
	describeBody(&c, m)
	c.BodySHA256 = dlq.BodySHA256(d.Body)
	if err := w.events(ctx, &c); err != nil {
		return c, err
	}
	if w.st != nil {
		as, err := w.st.Attempts(ctx, m.Key)
		if err != nil {
			return c, fail.New(fail.IO, fmt.Errorf("read the attempts of %s from the store: %w", dlq.Field(m.Key), err))
		}
		for _, a := range as {
			c.History = append(c.History, Attempt{At: a.At, Redelivered: a.Redelivered, Status: a.Status,
				Action: a.Outcome.Action.String(), Reason: a.Outcome.Reason.String(), Latency: a.Latency, Error: dlq.Field(a.Error)})
			if a.Outcome.Action != claim.Ack {
				c.Failures++
			}
		}
	}
	return c, nil
}

// events are the audit trail's entries that name the claim, each with what
// became of it there.
func (w *web) events(ctx context.Context, c *Claim) error {
	if w.trail == nil {
		return nil
	}
	err := w.trail.Entries(ctx, c.Key, func(e audit.Entry) error {
		ev := Event{At: e.At, Who: dlq.Field(e.Who), Via: dlq.Field(e.Via), Action: e.Action, Result: e.Result}
		if slices.Contains(e.IDs, c.Key) {
			ev.Note = dlq.ActedWord(e)
		}
		for _, nd := range e.NotDone {
			if nd.ID == c.Key {
				ev.Note = dlq.Field(nd.Why)
			}
		}
		if e.Edit != nil {
			ev.Note += "; Idempotency-Key " + dlq.Field(e.Edit.IdempotencyKey)
		}
		c.Events = append(c.Events, ev)
		return nil
	})
	if err != nil {
		return fail.New(fail.IO, err)
	}
	return nil
}

// describeBody sets the claim page's body: formatted when it is JSON,
// clipped when long, as it is for the edit form.
func describeBody(c *Claim, m *dlq.Dead) {
	d := m.Delivery()
	body := d.Body
	c.NotUTF8 = !utf8.Valid(body)
	if len(body) > dlq.MaxBody {
		body = body[:dlq.BodyWidth]
	}
	c.Editable = !c.NotUTF8 && len(body) == len(d.Body)
	var pretty bytes.Buffer
	if json.Indent(&pretty, body, "", "  ") == nil {
		c.Body = pretty.String()
	} else {
		c.Body = strings.ToValidUTF8(string(body), "\ufffd")
	}
	if len(body) < len(d.Body) {
		c.Body += fmt.Sprintf("\n… %d more bytes (dlq -json show %s prints the whole body)", len(d.Body)-len(body), dlq.Field(m.Key))
	}
	c.BodyRaw = string(d.Body)
}

// tableFields flattens AMQP headers into one field a line, keys sorted,
// values in the terminal-safe form the CLI prints.
func tableFields(out []Field, depth int, t amqp.Table) []Field {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = fields(out, depth, dlq.Field(k), t[k])
	}
	return out
}

func fields(out []Field, depth int, name string, v any) []Field {
	switch v := v.(type) {
	case amqp.Table:
		if name != "" {
			out = append(out, Field{Name: name, Depth: depth})
			depth++
		}
		return tableFields(out, depth, v)
	case []any:
		if name != "" {
			out = append(out, Field{Name: name, Depth: depth})
			depth++
		}
		for i, x := range v {
			out = fields(out, depth, fmt.Sprintf("[%d]", i), x)
		}
		return out
	}
	return append(out, Field{Name: name, Value: dlq.Scalar(v), Depth: depth})
}
