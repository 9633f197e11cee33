package dlq

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"

	"eaimq/internal/broker"
	"eaimq/internal/dlqweb"
	"eaimq/internal/redact"
	"eaimq/internal/store"
)

// web is dlqweb's Backend: each call one connection, one walk of
// claim.dead, under one lock.
//
// The lock: a walk takes every dead letter it looks at unacked until its
// channel closes, so two walks at once would each see part of claim.dead.
// One at a time, each page shows all of it.
type web struct {
	getenv func(string) string
	st     store.Store // nil with -no-store
	c      Config      // Limit, MaxReplays and Hooks

	mu sync.Mutex
}

// session dials, opens a browser, runs fn and closes both: every dead
// letter fn did not ack returns to claim.dead.
func (w *web) session(ctx context.Context, fn func(*Browser) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	conn, err := Dial(ctx, w.getenv)
	if err != nil {
		return err
	}
	defer broker.Close(conn)
	b, err := NewBrowser(conn, w.st)
	if err != nil {
		return err
	}
	defer b.Close()
	return fn(b)
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

func ref(m *dead) dlqweb.Ref {
	return dlqweb.Ref{Key: m.Key, ClaimID: m.ClaimID, Edited: m.edited(), Replays: m.Replays}
}

func (w *web) Overview(ctx context.Context) (dlqweb.Overview, error) {
	var o dlqweb.Overview
	err := w.session(ctx, func(b *Browser) error {
		byID := map[string]*dlqweb.Group{}
		var order []string
		err := b.walk(ctx, w.c.Limit, func(m *dead) (bool, error) {
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

func (w *web) Claim(ctx context.Context, id string) (c dlqweb.Claim, found bool, err error) {
	err = w.session(ctx, func(b *Browser) error {
		var m *dead
		err := b.walk(ctx, w.c.Limit, func(d *dead) (bool, error) {
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
