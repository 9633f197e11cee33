package dlqweb

import (
	"context"
	"strings"
	"sync"
	"time"

	"eaimq/internal/dlq"
	"eaimq/internal/fail"
	"eaimq/internal/topo"
)

// The groups page of a large DLQ. A walk of claim.dead makes the broker
// hold every message it looked at until it ends (docs/figures.md has what
// that costs), and on a quorum claim.dead each walk raises every dead
// letter's delivery count; a page that reloads every few seconds must not
// walk every time. So the groups are kept, and counted again only when
// they may have changed: an action ran since (at once), or claim.dead's
// depth (a passive declare, no walk) is not what it was (at the soonest
// nine walks' durations after the last ended, so that the broker holds a
// walk at most a tenth of the time), or they are older than maxAge (a
// purge by hand and a new dead letter leave the depth as it was); or the
// person asks (Count again now).

// maxAge is the longest the groups are kept when nothing says they changed.
const maxAge = time.Minute

// restWalks: after a walk that took d, the next waits 9*d.
const restWalks = 9

// cache is the groups the last walk counted.
type cache struct {
	mu       sync.Mutex
	snap     *snapshot
	building chan struct{} // closed when the walk under way ends; nil when none
}

type snapshot struct {
	o   Overview
	gen int64 // w.gen when the walk started
}

// next is when a walk may follow this one.
func (s *snapshot) next() time.Time { return s.o.At.Add(restWalks * s.o.Took) }

// fresh says whether s can be shown for claim.dead at depth (derr: the
// depth could not be read) and the actions run (gen), and with which note.
func (s *snapshot) fresh(depth int, derr error, gen int64) bool {
	if s.gen != gen || derr != nil {
		return false
	}
	now := time.Now()
	if depth == s.o.Total {
		return now.Sub(s.o.At) < max(maxAge, restWalks*s.o.Took)
	}
	return now.Before(s.next())
}

// Overview is the groups: kept ones when they are fresh, else a new walk
// (one at a time: a request that comes while one is under way is shown the
// groups kept, or waits for the walk when there are none).
func (w *web) Overview(ctx context.Context, refresh bool) (Overview, error) {
	// The depth is read only to judge kept groups (and to show it beside
	// them). Without any (the first load) or when the person asks for a new
	// count, the walk counts the depth itself: reading it before would be a
	// second pass over what the walk reads (over a million ingested rows in
	// PostgreSQL, a count of 0.6 s before the groups' own).
	var depth int
	var derr error
	read := false
	for {
		w.cache.mu.Lock()
		s, building := w.cache.snap, w.cache.building
		if s != nil && !refresh && !read {
			w.cache.mu.Unlock()
			depth, derr = w.depth(ctx)
			read = true
			continue
		}
		switch {
		case s != nil && !refresh && s.fresh(depth, derr, w.gen.Load()):
			w.cache.mu.Unlock()
			return kept(s, depth), nil
		case building != nil && s != nil && !refresh:
			w.cache.mu.Unlock()
			return kept(s, depth), nil
		case building != nil:
			w.cache.mu.Unlock()
			select {
			case <-building:
				refresh = false // the walk that just ended is new enough
				continue
			case <-ctx.Done():
				return Overview{}, ctx.Err()
			}
		}
		done := make(chan struct{})
		w.cache.building = done
		gen := w.gen.Load()
		w.cache.mu.Unlock()

		o, err := w.walkGroups(ctx)
		w.cache.mu.Lock()
		w.cache.building = nil
		if err == nil {
			w.cache.snap = &snapshot{o: o, gen: gen}
		}
		w.cache.mu.Unlock()
		close(done)
		return o, err
	}
}

// kept is the groups of s, shown again, with claim.dead's depth now.
func kept(s *snapshot, depth int) Overview {
	o := s.o
	o.Cached, o.Depth, o.Next = true, depth, s.next()
	return o
}

// Group is one page of a group's dead letters. Over ingested rows, the
// store's page of the group (its word and status, from the groups kept or
// counted now); over claim.dead, a walk of its own (a person asked for it),
// which counts all of the group and keeps one page.
func (w *web) Group(ctx context.Context, id string, page int) (List, error) {
	l := List{Page: page, Group: Group{ID: id, Reason: "(not in claim.dead now)"}}
	var sel *dlq.RowSelect
	if ok, err := w.ingested(ctx); err != nil {
		return l, err
	} else if ok {
		g, found, err := w.groupOfRows(ctx, id)
		if err != nil || !found {
			return l, err
		}
		l.Group, sel = g, g.rows
		l.Group.Claims = nil
	}
	err := w.collect(ctx, &l, sel, func(m *dlq.Dead) bool {
		if groupID(m) != id {
			return false
		}
		if l.Count == 0 {
			l.Group = *newGroup(m)
		}
		return true
	})
	return l, err
}

// groupOfRows is the group id among the ingested rows' groups: those kept,
// else counted now (a group's link opened before the groups page).
func (w *web) groupOfRows(ctx context.Context, id string) (Group, bool, error) {
	find := func(gs []Group) (Group, bool) {
		for _, g := range gs {
			if g.ID == id && g.rows != nil {
				return g, true
			}
		}
		return Group{}, false
	}
	w.cache.mu.Lock()
	s := w.cache.snap
	w.cache.mu.Unlock()
	if s != nil {
		if g, ok := find(s.o.Groups); ok {
			return g, true, nil
		}
	}
	o, err := w.Overview(ctx, false)
	if err != nil {
		return Group{}, false, err
	}
	g, ok := find(o.Groups)
	return g, ok, nil
}

// ingested says whether the page reads ingested rows (dlq ingest's), not
// claim.dead.
func (w *web) ingested(ctx context.Context) (bool, error) {
	n, err := dlq.Ingested(ctx, w.st)
	if err != nil {
		return false, fail.Errorf(fail.IO, "look for ingested dead letters in the store: %v", err)
	}
	return n > 0, nil
}

// Search is one page of the dead letters whose key, message_id or claimId
// holds q (letter case aside). Over ingested rows the store finds them
// (one pass of SQL over the two id columns).
func (w *web) Search(ctx context.Context, q string, page int) (List, error) {
	l := List{Page: page, Query: q}
	lq := strings.ToLower(q)
	err := w.collect(ctx, &l, &dlq.RowSelect{Contains: q}, func(m *dlq.Dead) bool {
		for _, s := range []string{m.Key, m.Delivery().MessageId, m.ClaimID} {
			if s != "" && strings.Contains(strings.ToLower(s), lq) {
				return true
			}
		}
		return false
	})
	return l, err
}

// Archive is one page of the purged dead letters in claim.dead.archive.
func (w *web) Archive(ctx context.Context, page int) (List, error) {
	l := List{Page: page, Archive: true}
	err := w.collectOn(ctx, topo.ArchiveQueue, &l, &dlq.RowSelect{}, func(*dlq.Dead) bool { return true })
	return l, err
}

// collect walks claim.dead (at most -limit), counts what match selects and
// keeps page l.Page of it; over ingested rows, the store's page of what
// rows selects (nil: match decides, over every row).
func (w *web) collect(ctx context.Context, l *List, rows *dlq.RowSelect, match func(*dlq.Dead) bool) error {
	return w.collectOn(ctx, topo.DeadQueue, l, rows, match)
}

// collectOn is collect on queue.
func (w *web) collectOn(ctx context.Context, queue string, l *List, rows *dlq.RowSelect, match func(*dlq.Dead) bool) error {
	from := (l.Page - 1) * PerPage
	return w.sessionOn(ctx, queue, func(b *dlq.Browser) error {
		if b.Rows() && rows != nil {
			p, err := b.RowPage(ctx, *rows, from, PerPage)
			for _, m := range p.Dead {
				l.Refs = append(l.Refs, ref(m))
			}
			l.Count, l.Looked, l.Total, l.Store = p.Count, p.Total, p.Total, true
			return err
		}
		err := b.Each(ctx, w.c.Limit, func(m *dlq.Dead) (bool, error) {
			if !match(m) {
				return true, nil
			}
			if l.Count >= from && l.Count < from+PerPage {
				l.Refs = append(l.Refs, ref(m))
			}
			l.Count++
			return true, nil
		})
		wk := b.Walked()
		l.Looked, l.Total, l.Store = wk.Looked, wk.Total, b.Rows()
		return err
	})
}
