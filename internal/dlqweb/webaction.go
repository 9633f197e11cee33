package dlq

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"eaimq/internal/claimid"
	"eaimq/internal/dlqweb"
	"eaimq/internal/fail"
	"eaimq/internal/store/deadletter"
	"eaimq/internal/topo"
)

// selector is what a web action selects: one dead letter, or a group.
func selector(t dlqweb.Target) func(*dead) bool {
	if t.ID != "" {
		return named(t.ID)
	}
	return func(m *dead) bool { return groupID(m) == t.Group }
}

// describeTarget is a web action's target for the audit trail.
func (w *web) describeTarget(t dlqweb.Target) string {
	if t.ID != "" {
		return "claim " + shellWord(t.ID)
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

// arrived counts the dead letters that came into claim.dead while an
// action ran: what it holds now, less what it held when the walk started
// and the action took out. It closes the walk's channel first, so that the
// dead letters the walk held unacked are back and counted.
//
// Over ingested rows it is the rows ingested since the action started.
func arrived(b *Browser, removed int) (int, error) {
	if b.ingested != nil {
		n, err := b.ingested.CountDeadLetters(context.Background(), deadletter.Query{After: b.narrow.Through, States: deadletter.Live})
		if err != nil {
			return 0, fail.Errorf(fail.IO, "count the dead letters ingested meanwhile: %v", err)
		}
		return int(n), nil
	}
	b.Close()
	ch, err := b.conn.Channel()
	if err != nil {
		return 0, fail.New(fail.Unavailable, err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(topo.DeadQueue, true, false, false, false, nil)
	if err != nil {
		return 0, fail.New(fail.Unavailable, fmt.Errorf("count %s: %w", topo.DeadQueue, err))
	}
	return max(0, q.Messages-(b.total-removed)), nil
}

func (w *web) Retry(ctx context.Context, who string, t dlqweb.Target) (dlqweb.Report, error) {
	return w.replay(ctx, "retry", who, t, nil)
}

// replay is retry and edit and retry: replayDead, with its audit entry.
// Every action makes the groups kept stale (gen).
func (w *web) replay(ctx context.Context, action, who string, t dlqweb.Target, e *edit) (dlqweb.Report, error) {
	rep := dlqweb.Report{Action: action}
	verb := map[string]string{"retry": "replay", "edit": "edit"}[action]
	rec, err := begin(ctx, w.trail, w.actor(who), verb, w.describeTarget(t), w.log)
	if err != nil {
		return rep, err
	}
	if e != nil {
		e.actor = w.actor(who)
		rec.e.Edit = e.audit()
	}
	defer w.gen.Add(1)
	err = w.session(ctx, func(b *Browser) error {
		if err := w.rowsReadOnly(b); err != nil {
			return err
		}
		r := rules{maxReplays: w.c.MaxReplays, edit: e, hooks: w.c.Hooks, actor: w.actor(who), rate: w.c.Rate}
		n, err := replayDead(ctx, b, selection{limit: w.c.Limit, selects: selector(t)}, r, func(n note) {
			rec.note(n)
			rep.Lines = append(rep.Lines, n.text())
		})
		rep.Replayed, rep.Delivered, rep.Again, rep.Refused = n.replayed, n.delivered, n.again, n.capped+n.refused+n.taken
		rep.Store = b.ingested != nil
		rep.NotFound = len(rep.Lines) == 0
		if err != nil {
			return err
		}
		rep.Arrived, err = arrived(b, n.replayed)
		return err
	})
	if rep.NotFound && t.ID != "" {
		rec.notDone(t.ID, "not in claim.dead")
	}
	return rep, rec.end(ctx, err)
}

func (w *web) Purge(ctx context.Context, who string, t dlqweb.Target) (dlqweb.Report, error) {
	rep := dlqweb.Report{Action: "purge", Archive: !w.c.NoArchive}
	rec, err := begin(ctx, w.trail, w.actor(who), "purge", w.describeTarget(t), w.log)
	if err != nil {
		return rep, err
	}
	verb := "deleted "
	if !w.c.NoArchive {
		rec.e.Archive, verb = topo.ArchiveQueue, "archived "
	}
	defer w.gen.Add(1)
	err = w.session(ctx, func(b *Browser) error {
		if err := w.rowsReadOnly(b); err != nil {
			return err
		}
		if !w.c.NoArchive {
			rec.e.Archive = b.archiveName()
		}
		if !w.c.NoArchive && b.ingested == nil {
			// As dlq purge: before anything is touched.
			if err := requireArchive(b.conn); err != nil {
				return err
			}
		}
		n, refused, err := purgeDead(ctx, b, selection{limit: w.c.Limit, selects: selector(t)}, purging{yes: true,
			archive: !w.c.NoArchive, actor: w.actor(who), hooks: w.c.Hooks,
			done: func(key string) {
				rec.acted(key)
				rep.Lines = append(rep.Lines, verb+field(key))
			},
			refused: func(key, why string) {
				rec.notDone(key, why)
				rep.Lines = append(rep.Lines, field(key)+": not purged: "+why)
			}})
		rep.Purged, rep.Refused, rep.NotFound = n, refused, n+refused == 0
		rep.Store = b.ingested != nil
		if err != nil {
			return err
		}
		rep.Arrived, err = arrived(b, n)
		return err
	})
	if rep.NotFound && t.ID != "" && err == nil {
		rec.notDone(t.ID, "not in claim.dead")
	}
	return rep, rec.end(ctx, err)
}

// Restore moves one archived dead letter back to claim.dead, as dlq
// restore does, with its audit entry.
func (w *web) Restore(ctx context.Context, who string, t dlqweb.Target) (dlqweb.Report, error) {
	rep := dlqweb.Report{Action: "restore"}
	if t.ID == "" {
		return rep, fail.Errorf(fail.Usage, "restore takes one claim (id), not a group")
	}
	rec, err := begin(ctx, w.trail, w.actor(who), "restore", w.describeTarget(t), w.log)
	if err != nil {
		return rep, err
	}
	defer w.gen.Add(1)
	err = w.sessionOn(ctx, topo.ArchiveQueue, func(b *Browser) error {
		if err := w.rowsReadOnly(b); err != nil {
			return err
		}
		n, refused, err := restoreArchived(ctx, b, selection{limit: w.c.Limit, selects: named(t.ID)}, w.actor(who), w.c.Hooks, func(key string) {
			rec.acted(key)
			rep.Lines = append(rep.Lines, "restored "+field(key))
		}, func(key, why string) {
			rec.notDone(key, why)
			rep.Lines = append(rep.Lines, field(key)+": not restored: "+why)
		})
		rep.Restored, rep.Refused, rep.NotFound = n, refused, n+refused == 0
		rep.Store = b.ingested != nil
		return err
	})
	if rep.NotFound && err == nil {
		rec.notDone(t.ID, "not in "+topo.ArchiveQueue)
	}
	return rep, rec.end(ctx, err)
}

// checkEdit checks an edited body as publish checks a claim file, and that
// it stays the same claim: its guid is the dead letter's message_id (or
// guid), since the copy keeps that message_id and the consumer's dedup
// record is filed under it. Only a dead letter that had no usable id (a
// sha256: key) may get one. dlq edit and the page's edit and retry both
// check with it.
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

func (w *web) EditRetry(ctx context.Context, who, id string, body []byte, previous string) (dlqweb.Report, error) {
	guid, err := checkEdit(id, body)
	if err != nil {
		return dlqweb.Report{Action: "edit"}, err
	}
	return w.replay(ctx, "edit", who, dlqweb.Target{ID: id}, &edit{body: body, guid: guid, previous: previous})
}
