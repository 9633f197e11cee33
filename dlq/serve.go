package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/claim"
	"eaimq/internal/claimid"
	"eaimq/internal/cli"
	"eaimq/internal/dlqweb"
	"eaimq/internal/redact"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// serve runs dlq serve until ctx ends: the web page of dlqweb, backed by
// the functions the other commands run.
func serve(ctx context.Context, getenv func(string) string, st store.Store, o *options, stdout, stderr io.Writer) error {
	w := &web{getenv: getenv, st: st, limit: o.limit, maxReplays: o.maxReplays}
	cfg := dlqweb.Config{Addr: o.addr, Token: getenv(dlqweb.EnvToken), ReadOnly: o.readOnly, Refresh: o.refresh,
		Backend: w, Clean: w.clean, Log: stderr}
	h, err := dlqweb.New(cfg)
	if err != nil {
		return cli.Usagef("%v", err)
	}
	// The broker and claim.dead are checked once before listening, so that
	// a wrong URL or a missing topology is an exit code, not a page of errors.
	if err := w.session(ctx, func(*amqp.Connection, *browser) error { return nil }); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return cli.Exitf(cli.ExitConfig, "-addr %s: %v; choose another -addr", o.addr, err)
	}
	mode := ""
	if o.readOnly {
		mode = " (read-only)"
	}
	fmt.Fprintf(stdout, "dlq: serving http://%s/%s; Ctrl-C stops\n", ln.Addr(), mode)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		// An action under way finishes (its dead copies are acked after
		// their confirms, or stay); new requests are refused.
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	err = srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil // stopping the page is its normal end
	}
	return cli.Exit(cli.ExitConfig, err)
}

// web is dlqweb's Backend: each call one connection, one walk of
// claim.dead, under one lock.
//
// The lock: a walk takes every dead letter it looks at unacked until its
// channel closes, so two walks at once would each see part of claim.dead.
// One at a time, each page shows all of it.
type web struct {
	getenv     func(string) string
	st         store.Store // nil with -no-store
	limit      int
	maxReplays int

	mu sync.Mutex
}

// session dials, opens a browser, runs fn and closes both: every dead
// letter fn did not ack returns to claim.dead.
func (w *web) session(ctx context.Context, fn func(*amqp.Connection, *browser) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	conn, err := dial(ctx, w.getenv)
	if err != nil {
		return err
	}
	defer broker.Close(conn)
	b, err := newBrowser(conn, w.st)
	if err != nil {
		return err
	}
	defer b.ch.Close()
	return fn(conn, b)
}

// clean takes the store's location and the broker's URL out of a message:
// the page may be read by people who must not learn either.
func (w *web) clean(s string) string {
	locations := []string{store.Path(w.getenv), broker.URL(w.getenv)}
	if w.st != nil {
		locations = append(locations, w.st.Path())
	}
	return redact.Remove(s, locations...)
}

// groupOf is the group of a dead letter: its recorded reason, and the last
// status for the reasons that have one.
func groupOf(m *dead) (id, reason string, status int) {
	reason = m.reason().String()
	if m.Known {
		status = m.Rec.LastStatus
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", reason, status)))
	return hex.EncodeToString(sum[:6]), reason, status
}

func edited(m *dead) bool { _, ok := m.d.Headers[editHeader]; return ok }

func ref(m *dead) dlqweb.Ref {
	return dlqweb.Ref{Key: m.Key, ClaimID: m.ClaimID, Edited: edited(m), Replays: m.Replays}
}

func (w *web) Overview(ctx context.Context) (dlqweb.Overview, error) {
	var o dlqweb.Overview
	err := w.session(ctx, func(_ *amqp.Connection, b *browser) error {
		byID := map[string]*dlqweb.Group{}
		var order []string
		err := b.walk(ctx, w.limit, func(m *dead) (bool, error) {
			id, reason, status := groupOf(m)
			g := byID[id]
			if g == nil {
				g = &dlqweb.Group{ID: id, Reason: reason, Status: status, Sentence: m.sentence()}
				if m.NoStore || !m.Known {
					g.Sentence = m.why()
				}
				if m.Known && m.Rec.LastStatus != 0 {
					g.Answer = clip(esc(m.Rec.LastError, false), fieldWidth)
				}
				byID[id] = g
				order = append(order, id)
			}
			g.Count++
			if !m.DeadAt.IsZero() {
				if g.First.IsZero() || m.DeadAt.Before(g.First) {
					g.First = m.DeadAt
				}
				if m.DeadAt.After(g.Last) {
					g.Last = m.DeadAt
				}
			}
			if len(g.Claims) < dlqweb.MaxListed {
				g.Claims = append(g.Claims, ref(m))
			}
			return true, nil
		})
		o.Total, o.Looked = b.total, b.looked
		for _, id := range order {
			o.Groups = append(o.Groups, *byID[id])
		}
		// The biggest group first: that is where the work is.
		slices.SortStableFunc(o.Groups, func(a, b dlqweb.Group) int { return b.Count - a.Count })
		return err
	})
	return o, err
}

// named selects the dead letter id, as the CLI's IDs do.
func named(id string) func(*dead) bool {
	return func(m *dead) bool { return id == m.Key || id == m.d.MessageId }
}

func (w *web) Claim(ctx context.Context, id string) (c dlqweb.Claim, found bool, err error) {
	err = w.session(ctx, func(_ *amqp.Connection, b *browser) error {
		var m *dead
		err := b.walk(ctx, w.limit, func(d *dead) (bool, error) {
			if named(id)(d) {
				m = d
				return false, nil
			}
			return true, nil
		})
		if err != nil || m == nil {
			return err
		}
		found = true
		c, err = w.describe(ctx, m)
		return err
	})
	return c, found, err
}

func (w *web) describe(ctx context.Context, m *dead) (dlqweb.Claim, error) {
	d := m.d
	c := dlqweb.Claim{Ref: ref(m), Why: m.why()}
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

	if w.st != nil {
		as, err := w.st.Attempts(ctx, m.Key)
		if err != nil {
			return c, cli.Exit(cli.ExitIOErr, fmt.Errorf("read the attempts of %s from the store: %w", field(m.Key), err))
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

// selector is what a web action selects: one dead letter, or a group.
func selector(t dlqweb.Target) func(*dead) bool {
	if t.ID != "" {
		return named(t.ID)
	}
	return func(m *dead) bool { id, _, _ := groupOf(m); return id == t.Group }
}

// arrived counts the dead letters that came into claim.dead while an
// action ran: what it holds now, less what it held when the walk started
// and the action took out. It closes the walk's channel first, so that the
// dead letters the walk held unacked are back and counted.
func arrived(conn *amqp.Connection, b *browser, removed int) (int, error) {
	b.ch.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, cli.Exit(cli.ExitUnavailable, err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(topo.DeadQueue, true, false, false, false, nil)
	if err != nil {
		return 0, cli.Exit(cli.ExitUnavailable, fmt.Errorf("count %s: %w", topo.DeadQueue, err))
	}
	return max(0, q.Messages-(b.total-removed)), nil
}

func (w *web) Retry(ctx context.Context, t dlqweb.Target) (dlqweb.Report, error) {
	return w.replay(ctx, "retry", t, nil)
}

func (w *web) replay(ctx context.Context, action string, t dlqweb.Target, e *edit) (dlqweb.Report, error) {
	rep := dlqweb.Report{Action: action}
	err := w.session(ctx, func(conn *amqp.Connection, b *browser) error {
		n, err := replayDead(ctx, conn, b, selection{w.limit, selector(t)}, rules{maxReplays: w.maxReplays, edit: e}, func(n note) {
			rep.Lines = append(rep.Lines, n.text())
		})
		rep.Replayed, rep.Delivered, rep.Again, rep.Refused = n.replayed, n.delivered, n.again, n.capped+n.refused
		rep.NotFound = len(rep.Lines) == 0
		if err != nil {
			return err
		}
		rep.Arrived, err = arrived(conn, b, n.replayed)
		return err
	})
	return rep, err
}

func (w *web) Purge(ctx context.Context, t dlqweb.Target) (dlqweb.Report, error) {
	rep := dlqweb.Report{Action: "purge"}
	err := w.session(ctx, func(conn *amqp.Connection, b *browser) error {
		n, err := purgeDead(ctx, b, selection{w.limit, selector(t)}, true, func(key string) {
			rep.Lines = append(rep.Lines, "deleted "+field(key))
		})
		rep.Purged, rep.NotFound = n, n == 0
		if err != nil {
			return err
		}
		rep.Arrived, err = arrived(conn, b, n)
		return err
	})
	return rep, err
}

// checkEdit checks an edited body as publish checks a claim file, and that
// it stays the same claim: its guid is the dead letter's message_id (or
// guid), since the copy keeps that message_id and the consumer's dedup
// record is filed under it. Only a dead letter that had no usable id (a
// sha256: key) may get one.
func checkEdit(id string, body []byte) (string, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return "", fmt.Errorf("%w: the body is empty", dlqweb.ErrInvalid)
	}
	if len(body) > dlqweb.MaxBody {
		return "", fmt.Errorf("%w: larger than the %d-byte limit (publish's -max-bytes)", dlqweb.ErrInvalid, dlqweb.MaxBody)
	}
	guid, err := claimid.Guid(body)
	if err != nil {
		return "", fmt.Errorf("%w: not a claim publish would send: %v", dlqweb.ErrInvalid, err)
	}
	if !strings.HasPrefix(id, "sha256:") && guid != id {
		return "", fmt.Errorf("%w: the guid is %q, and must stay %q: the copy keeps its message_id", dlqweb.ErrInvalid, field(guid), field(id))
	}
	return guid, nil
}

func (w *web) CheckEdit(id string, body []byte) error {
	_, err := checkEdit(id, body)
	return err
}

func (w *web) EditRetry(ctx context.Context, id string, body []byte) (dlqweb.Report, error) {
	guid, err := checkEdit(id, body)
	if err != nil {
		return dlqweb.Report{Action: "edit"}, err
	}
	return w.replay(ctx, "edit", dlqweb.Target{ID: id}, &edit{body: body, guid: guid, by: "dlq serve"})
}
