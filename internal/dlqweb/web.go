package dlqweb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/audit"
	"eaimq/internal/broker"
	"eaimq/internal/dlq"
	"eaimq/internal/fail"
	"eaimq/internal/redact"
	"eaimq/internal/store"
	"eaimq/internal/store/deadletter"
	"eaimq/internal/topo"
)

// web is dlqweb's Backend: each call one connection, one walk of
// claim.dead, under one lock; the groups are kept between walks (cache).
//
// The lock: a walk takes every dead letter it looks at unacked until its
// channel closes, so two walks at once would each see part of claim.dead.
// One at a time, each page shows all of it.
type web struct {
	getenv func(string) string
	st     store.Store // nil with -no-store
	trail  audit.Trail // nil with -no-store
	c      dlq.Config  // Limit, MaxReplays, Actor (who runs the page) and Hooks
	log    io.Writer   // warnings

	mu    sync.Mutex // one walk at a time
	cache cache
	gen   atomic.Int64 // actions run: groups counted before one are stale

	// writable says st was opened for writing: where dead letters are
	// ingested, the page reads and acts on their rows, and an action is
	// a change of the rows' states (Serve's caller opens it so when it
	// ingests, or finds rows, at start).
	writable bool
}

// session dials, opens a browser, runs fn and closes both: every dead
// letter fn did not ack returns to claim.dead.
func (w *web) session(ctx context.Context, fn func(*dlq.Browser) error) error {
	return w.sessionOn(ctx, topo.DeadQueue, fn)
}

// sessionOn is session on queue: claim.dead, or the archive. Under the
// same lock: a purge moves dead letters into the archive, a restore out of
// it, and a walk of either must not meet one half-way.
func (w *web) sessionOn(ctx context.Context, queue string, fn func(*dlq.Browser) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	conn, err := dlq.Dial(ctx, w.getenv)
	if err != nil {
		return err
	}
	defer broker.Close(conn)
	b, err := w.browser(ctx, conn, queue)
	if err != nil {
		return err
	}
	b.MaxHeld = w.c.MaxHeld
	defer b.Close()
	defer b.BoundNote(w.log) // the page shows how many it looked at of how many
	return fn(b)
}

// browser is the page's source: the ingested rows where there are some
// (the archive's for claim.dead.archive), else the queue; the one model
// either way, so every page and action is the command line's.
func (w *web) browser(ctx context.Context, conn *amqp.Connection, queue string) (*dlq.Browser, error) {
	n, err := dlq.Ingested(ctx, w.st)
	if err != nil {
		return nil, fail.Errorf(fail.IO, "look for ingested dead letters in the store: %v", err)
	}
	switch {
	case n == 0 && queue == topo.ArchiveQueue:
		return dlq.NewArchiveBrowser(conn, w.st)
	case n == 0:
		return dlq.NewBrowser(conn, w.st)
	case queue == topo.ArchiveQueue:
		return dlq.NewIngestedArchiveBrowser(conn, w.st)
	}
	return dlq.NewIngestedBrowser(conn, w.st)
}

// depth is claim.dead's ready messages now, on a connection of its own:
// it does not wait for a walk. Where dead letters are ingested it is the
// rows still to be dealt with (deadletter.Live): what the page shows.
func (w *web) depth(ctx context.Context) (int, error) {
	if n, err := dlq.Ingested(ctx, w.st); err == nil && n > 0 {
		dl, _ := store.DeadLettersOf(w.st)
		live, err := dl.CountDeadLetters(ctx, deadletter.Query{States: deadletter.Live})
		if err != nil {
			return 0, fail.Errorf(fail.IO, "count the ingested dead letters: %v", err)
		}
		return int(live), nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := dlq.Dial(ctx, w.getenv)
	if err != nil {
		return 0, err
	}
	defer broker.Close(conn)
	ch, err := conn.Channel()
	if err != nil {
		return 0, fail.New(fail.Unavailable, err)
	}
	q, err := ch.QueueDeclarePassive(topo.DeadQueue, true, false, false, false, nil)
	if err != nil {
		return 0, fail.Broker(fmt.Errorf("count %s: %w", topo.DeadQueue, err), topo.ErrMissing)
	}
	return q.Messages, nil
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

// bannerOf is the page's banner for EAI_AMQP_URL raw: each address's
// scheme, host and port, never its user or password; the vhost; the queue.
func bannerOf(raw string) Banner {
	b := Banner{Queue: topo.DeadQueue, VHost: "?"}
	if v, err := broker.VHost(raw); err == nil {
		b.VHost = v
	}
	var hosts []string
	for _, a := range broker.Addresses(raw) {
		u, err := amqp.ParseURI(a)
		if err != nil {
			hosts = append(hosts, "(an address that does not parse)")
			continue
		}
		hosts = append(hosts, u.Scheme+"://"+net.JoinHostPort(u.Host, strconv.Itoa(u.Port)))
	}
	b.Broker = strings.Join(hosts, ", ")
	return b
}

// actor is who acts through the page: the token's name, else whoever runs
// it (on loopback without tokens, whoever reaches the page is on this host).
func (w *web) actor(who string) dlq.Actor {
	if who == "" {
		return dlq.Actor{Who: w.c.Actor.Who, Via: "dlq serve (loopback, no token)"}
	}
	return dlq.Actor{Who: who, Via: "dlq serve"}
}

// groupOf is the group of a dead letter: its reason (the one on record, or
// crash-loop), and the last status for the reasons that have one.
func groupOf(m *dlq.Dead) (id, reason string, status int) {
	reason = m.Word()
	if m.Known && !m.CrashLoop() {
		status = m.Rec.LastStatus
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", reason, status)))
	return hex.EncodeToString(sum[:6]), reason, status
}

func ref(m *dlq.Dead) Ref {
	_, reason, status := groupOf(m)
	r := Ref{Key: m.Key, ClaimID: m.ClaimID, DeadAt: m.DeadAt, Reason: reason, Status: status, Edited: m.Edit != nil, Replays: m.Replays}
	if p := m.Purged; p != nil {
		r.PurgedAt, r.PurgedBy = p.At, p.By
	}
	return r
}

// newGroup is the group m starts.
func newGroup(m *dlq.Dead) *Group {
	id, reason, status := groupOf(m)
	g := &Group{ID: id, Reason: reason, Status: status, Sentence: m.Sentence()}
	switch {
	case m.CrashLoop():
		g.Sentence = m.CrashSentence(true)
	case m.NoStore || !m.Known:
		g.Sentence = m.Why()
	}
	if m.Known && m.Rec.LastStatus != 0 && !m.CrashLoop() {
		g.Answer = dlq.Clip(dlq.Esc(m.Rec.LastError, false), dlq.FieldWidth)
	}
	return g
}

// walkGroups walks claim.dead (at most -limit) and counts its groups.
func (w *web) walkGroups(ctx context.Context) (Overview, error) {
	var o Overview
	start := time.Now()
	err := w.session(ctx, func(b *dlq.Browser) error {
		if b.Rows() {
			return w.groupsOfRows(ctx, b, &o)
		}
		byID := map[string]*Group{}
		var order []string
		err := b.Each(ctx, w.c.Limit, func(m *dlq.Dead) (bool, error) {
			g := byID[groupID(m)]
			if g == nil {
				g = newGroup(m)
				byID[g.ID] = g
				order = append(order, g.ID)
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
			if len(g.Claims) < MaxListed {
				g.Claims = append(g.Claims, ref(m))
			}
			return true, nil
		})
		wk := b.Walked()
		o.Total, o.Looked, o.Depth = wk.Total, wk.Looked, wk.Total
		for _, id := range order {
			o.Groups = append(o.Groups, *byID[id])
		}
		// The biggest group first: that is where the work is.
		slices.SortStableFunc(o.Groups, func(a, b Group) int { return b.Count - a.Count })
		o.Warning = quorumText(b)
		return err
	})
	o.At, o.Took = time.Now().UTC(), time.Since(start).Round(time.Millisecond)
	return o, err
}

func groupID(m *dlq.Dead) string { id, _, _ := groupOf(m); return id }

// groupsOfRows is the groups of the ingested rows, counted by the
// database (Browser.RowGroups: a GROUP BY, then a page a group).
func (w *web) groupsOfRows(ctx context.Context, b *dlq.Browser, o *Overview) error {
	groups, err := b.RowGroups(ctx, MaxListed)
	if err != nil {
		return err
	}
	for _, g := range groups {
		grp := newGroup(g.Dead[0])
		grp.Count, grp.First, grp.Last = g.Count, g.First, g.Last
		grp.rows = &g.Select
		for _, m := range g.Dead {
			grp.Claims = append(grp.Claims, ref(m))
		}
		o.Groups = append(o.Groups, *grp)
		o.Total += grp.Count
	}
	o.Looked, o.Depth = o.Total, o.Total
	slices.SortStableFunc(o.Groups, func(a, b Group) int { return b.Count - a.Count })
	return nil
}

// quorumText is QuorumWarning for the page.
func quorumText(b *dlq.Browser) string {
	var s strings.Builder
	dlq.QuorumWarning(b, &s)
	return strings.TrimPrefix(strings.TrimSpace(s.String()), "dlq: warning: ")
}

func (w *web) Claim(ctx context.Context, id string) (c Claim, found bool, err error) {
	err = w.session(ctx, func(b *dlq.Browser) error {
		var m *dlq.Dead
		err := b.Each(ctx, w.c.Limit, func(d *dlq.Dead) (bool, error) {
			if dlq.Named(id)(d) {
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

// Health is /healthz: the broker answers and claim.dead is there, and the
// store reads (when there is one).
func (w *web) OverRows(ctx context.Context) bool {
	n, err := dlq.Ingested(ctx, w.st)
	return err == nil && n > 0
}

func (w *web) Health(ctx context.Context) Health {
	h := Health{OK: true, Store: "none"}
	n, err := w.depth(ctx)
	if err != nil {
		h.OK, h.Error = false, err.Error()
	}
	h.Depth = n
	if w.st != nil {
		h.Store = "ok"
		if _, _, err := w.st.Get(ctx, "dlq-healthz"); err != nil {
			h.OK, h.Store = false, err.Error()
		}
	}
	return h
}
