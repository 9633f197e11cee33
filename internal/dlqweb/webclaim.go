package dlq

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
	"eaimq/internal/dlqweb"
	"eaimq/internal/fail"
)

// describe is the claim page of m: every field escaped as show escapes it,
// the body formatted when it is JSON, the store's attempts.
func (w *web) describe(ctx context.Context, m *dead) (dlqweb.Claim, error) {
	d := m.d
	c := dlqweb.Claim{Ref: ref(m), Why: m.Why()}
	c.GroupID, _, _ = groupOf(m)
	if m.Known {
		c.Record = fmt.Sprintf("state %s, %d partner call(s), last status %d %s", field(string(m.Rec.State)), m.Rec.Attempts,
			m.Rec.LastStatus, field(m.Rec.LastError))
	}
	ts := "-"
	if !d.Timestamp.IsZero() {
		ts = d.Timestamp.UTC().Format(time.RFC3339)
	}
	c.Properties = []dlqweb.Field{
		{Name: "message_id", Value: field(d.MessageId)}, {Name: "store key", Value: field(m.Key)},
		{Name: "content_type", Value: field(d.ContentType)}, {Name: "delivery_mode", Value: fmt.Sprint(d.DeliveryMode)},
		{Name: "timestamp", Value: ts}, {Name: "app_id", Value: field(d.AppId)},
		{Name: "correlation_id", Value: field(d.CorrelationId)},
	}
	for k, v := range d.Headers {
		switch k {
		case "x-death":
			c.XDeath = fields(c.XDeath, 0, "", v)
		case editHeader:
			if t, ok := v.(amqp.Table); ok {
				c.Edit = tableFields(nil, 0, t)
			}
		}
	}
	// x-death and the edit header have their own sections.
	rest := amqp.Table{}
	for k, v := range d.Headers {
		if k != "x-death" && k != editHeader {
			rest[k] = v
		}
	}
	c.Headers = tableFields(nil, 0, rest)
	describeBody(&c, m)
	c.BodySHA256 = sha256hex(d.Body)
	if err := w.events(ctx, &c); err != nil {
		return c, err
	}
	if w.st != nil {
		as, err := w.st.Attempts(ctx, m.Key)
		if err != nil {
			return c, fail.New(fail.IO, fmt.Errorf("read the attempts of %s from the store: %w", field(m.Key), err))
		}
		for _, a := range as {
			c.History = append(c.History, dlqweb.Attempt{At: a.At, Redelivered: a.Redelivered, Status: a.Status,
				Action: a.Outcome.Action.String(), Reason: a.Outcome.Reason.String(), Latency: a.Latency, Error: field(a.Error)})
			if a.Outcome.Action != claim.Ack {
				c.Failures++
			}
		}
	}
	return c, nil
}

// events are the audit trail's entries that name the claim, each with what
// became of it there.
func (w *web) events(ctx context.Context, c *dlqweb.Claim) error {
	if w.trail == nil {
		return nil
	}
	err := w.trail.Entries(ctx, c.Key, func(e audit.Entry) error {
		ev := dlqweb.Event{At: e.At, Who: field(e.Who), Via: field(e.Via), Action: e.Action, Result: e.Result}
		if slices.Contains(e.IDs, c.Key) {
			ev.Note = ActedWord(e)
		}
		for _, nd := range e.NotDone {
			if nd.ID == c.Key {
				ev.Note = field(nd.Why)
			}
		}
		if e.Edit != nil {
			ev.Note += "; Idempotency-Key " + field(e.Edit.IdempotencyKey)
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
func describeBody(c *dlqweb.Claim, m *dead) {
	d := m.d
	body := d.Body
	c.NotUTF8 = !utf8.Valid(body)
	if len(body) > dlqweb.MaxBody {
		body = body[:bodyWidth]
	}
	c.Editable = !c.NotUTF8 && len(body) == len(d.Body)
	var pretty bytes.Buffer
	if json.Indent(&pretty, body, "", "  ") == nil {
		c.Body = pretty.String()
	} else {
		c.Body = strings.ToValidUTF8(string(body), "\ufffd")
	}
	if len(body) < len(d.Body) {
		c.Body += fmt.Sprintf("\n… %d more bytes (dlq -json show %s prints the whole body)", len(d.Body)-len(body), field(m.Key))
	}
	c.BodyRaw = string(d.Body)
}

// tableFields flattens AMQP headers into one field a line, keys sorted,
// values in the terminal-safe form the CLI prints.
func tableFields(out []dlqweb.Field, depth int, t amqp.Table) []dlqweb.Field {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = fields(out, depth, field(k), t[k])
	}
	return out
}

func fields(out []dlqweb.Field, depth int, name string, v any) []dlqweb.Field {
	switch v := v.(type) {
	case amqp.Table:
		if name != "" {
			out = append(out, dlqweb.Field{Name: name, Depth: depth})
			depth++
		}
		return tableFields(out, depth, v)
	case []any:
		if name != "" {
			out = append(out, dlqweb.Field{Name: name, Depth: depth})
			depth++
		}
		for i, x := range v {
			out = fields(out, depth, fmt.Sprintf("[%d]", i), x)
		}
		return out
	}
	return append(out, dlqweb.Field{Name: name, Value: scalar(v), Depth: depth})
}
