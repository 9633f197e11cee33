package dlqweb

import (
	"context"
	"fmt"

	"eaimq/internal/dlq"
)

// selector is what a web action selects: one dead letter, or a group.
func selector(t Target) func(*dlq.Dead) bool {
	if t.ID != "" {
		return dlq.Named(t.ID)
	}
	return func(m *dlq.Dead) bool { return groupID(m) == t.Group }
}

// describeTarget is a web action's target for the audit trail.
func (w *web) describeTarget(t Target) string {
	if t.ID != "" {
		return "claim " + dlq.ShellWord(t.ID)
	}
	w.cache.mu.Lock()
	defer w.cache.mu.Unlock()
	if s := w.cache.snap; s != nil {
		for _, g := range s.o.Groups {
			if g.ID == t.Group {
				if g.Status != 0 {
					return fmt.Sprintf("group %s %d", g.Reason, g.Status)
				}
				return "group " + g.Reason
			}
		}
	}
	return "group " + t.Group
}

// keptRows is t's group as the store selects it over ingested rows, from
// the groups kept (an action on a group comes from the groups page, which
// counted them); nil for one claim, or a group not kept (then Selects
// decides over every row).
func (w *web) keptRows(t Target) *dlq.RowSelect {
	if t.ID != "" {
		return nil
	}
	w.cache.mu.Lock()
	defer w.cache.mu.Unlock()
	if s := w.cache.snap; s != nil {
		for _, g := range s.o.Groups {
			if g.ID == t.Group {
				return g.rows
			}
		}
	}
	return nil
}

// act is the engine's action on t by who: its audit target, what it
// selects, and the page's limits.
func (w *web) act(who string, t Target) dlq.Act {
	return dlq.Act{Actor: w.actor(who), Target: w.describeTarget(t), ID: t.ID, Selects: selector(t), Rows: w.keptRows(t), Limit: w.c.Limit,
		MaxReplays: w.c.MaxReplays, Rate: w.c.Rate, NoArchive: w.c.NoArchive, Hooks: w.c.Hooks,
		Trail: w.trail, Log: w.log, RowsReadOnly: !w.writable}
}

// acting is the session an action runs in. Every action makes the groups
// kept stale (gen), once it has begun: the engine opens the session only
// after its audit entry could be begun, so an action the trail refused
// leaves them as they were.
func (w *web) acting() (dlq.Session, func()) {
	begun := false
	s := func(ctx context.Context, queue string, fn func(*dlq.Browser) error) error {
		begun = true
		return w.sessionOn(ctx, queue, fn)
	}
	return s, func() {
		if begun {
			w.gen.Add(1)
		}
	}
}

// report is what an action did, as the page shows it.
func report(action string, a dlq.Acted) Report {
	return Report{Action: action, Lines: a.Lines, Replayed: a.Replayed, Delivered: a.Delivered, Again: a.Again, Refused: a.Refused,
		Purged: a.Purged, Restored: a.Restored, Arrived: a.Arrived, Store: a.Rows, NotFound: a.NotFound}
}

func (w *web) Retry(ctx context.Context, who string, t Target) (Report, error) {
	s, done := w.acting()
	defer done()
	a, err := w.act(who, t).Replay(ctx, s)
	return report("retry", a), err
}

func (w *web) Purge(ctx context.Context, who string, t Target) (Report, error) {
	s, done := w.acting()
	defer done()
	a, err := w.act(who, t).Purge(ctx, s)
	rep := report("purge", a)
	rep.Archive = !w.c.NoArchive
	return rep, err
}

// Restore moves one archived dead letter back to claim.dead, as dlq
// restore does, with its audit entry.
func (w *web) Restore(ctx context.Context, who string, t Target) (Report, error) {
	s, done := w.acting()
	defer done()
	a, err := w.act(who, t).Restore(ctx, s)
	return report("restore", a), err
}

func (w *web) CheckEdit(id string, body []byte) error {
	_, err := dlq.CheckEdit(id, body)
	return err
}

func (w *web) EditRetry(ctx context.Context, who, id string, body []byte, previous string) (Report, error) {
	s, done := w.acting()
	defer done()
	a, err := w.act(who, Target{ID: id}).Edit(ctx, s, body, previous)
	return report("edit", a), err
}
