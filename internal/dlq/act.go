package dlq

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"eaimq/internal/audit"
	"eaimq/internal/claimid"
	"eaimq/internal/fail"
	"eaimq/internal/store/deadletter"
	"eaimq/internal/topo"
)

// Act is one action a front takes on a selection of its own (dlq serve's
// page: one claim, or a group) rather than on a Config's flags: the same
// replayDead, purgeDead and restoreArchived the commands run, each with its
// audit entry, so that the page is exactly as safe as the command line.
type Act struct {
	Actor   Actor
	Target  string           // the audit entry's target ("claim ID", "group rejected 422")
	ID      string           // the one dead letter it names ("": a group); not found, it is the entry's not done
	Selects func(*Dead) bool // what it acts on
	// Rows (nil: none) is the group Selects selects, for the store to
	// find over ingested rows (RowSelect's Word and Status), as ID is the
	// one dead letter: over a million rows, an action on one claim or one
	// group read every row through the model before Selects decided.
	Rows  *RowSelect
	Limit int // look at the first Limit dead letters only (0: all)

	MaxReplays int     // replay: refuse a dead letter replayed this often already
	Rate       float64 // replay: at most Rate copies a second (0: no pacing)
	NoArchive  bool    // purge: delete for good instead of archiving
	Hooks      Hooks

	Trail audit.Trail // nil: none (-no-store)
	Log   io.Writer   // warnings of the trail
	// RowsReadOnly: the front's store was opened read-only, so an action
	// over ingested rows (which changes their states) is refused.
	RowsReadOnly bool
}

// Session runs fn on a browser of queue (claim.dead, or the archive) and
// closes it: the front's connection, under the front's lock.
type Session func(ctx context.Context, queue string, fn func(*Browser) error) error

// Acted is what an Act did.
type Acted struct {
	Lines []string // one a dead letter: what became of it, as the commands say it
	// Replay: copies sent, of them delivered before, sent again; refused
	// (-max-replays, a newer body, another replay's).
	Replayed, Delivered, Again, Refused int
	Purged, Restored                    int
	Arrived                             int  // dead letters that came in meanwhile
	Rows                                bool // it acted on ingested rows, not a queue
	NotFound                            bool // nothing it selects was there
}

// narrow tells an ingested source what a selects (ID, Rows), as a
// command's flags do (narrowTo): the store finds the rows by its indexes,
// and Selects still decides.
func (a Act) narrow(b *Browser) {
	if b.ingested == nil {
		return
	}
	var c Config
	if a.ID != "" {
		c.IDs = []string{a.ID}
	}
	b.narrowTo(c)
	if a.Rows != nil && a.ID == "" {
		b.narrow.Group, b.narrow.GroupStatus = a.Rows.Word, a.Rows.Status
	}
}

// refuseRows refuses an action over ingested rows when the front's store
// was opened read-only (rows were ingested only after it started).
func (a Act) refuseRows(b *Browser) error {
	if b.ingested != nil && a.RowsReadOnly {
		return fail.Errorf(fail.Failed, "dead letters were ingested into the store since this page started: restart dlq serve "+
			"so that it acts on their rows; nothing was done")
	}
	return nil
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

// Replay is the page's retry: replayDead, with its audit entry.
func (a Act) Replay(ctx context.Context, s Session) (Acted, error) {
	return a.replay(ctx, s, "replay", nil)
}

// Edit is the page's edit and retry: body, checked as CheckEdit checks it,
// replayed in place of the dead letter a.ID's when its body still has the
// sha256 previous ("": any).
func (a Act) Edit(ctx context.Context, s Session, body []byte, previous string) (Acted, error) {
	guid, err := CheckEdit(a.ID, body)
	if err != nil {
		return Acted{}, err
	}
	return a.replay(ctx, s, "edit", &edit{body: body, guid: guid, previous: previous})
}

func (a Act) replay(ctx context.Context, s Session, verb string, e *edit) (Acted, error) {
	var done Acted
	rec, err := begin(ctx, a.Trail, a.Actor, verb, a.Target, a.Log)
	if err != nil {
		return done, err
	}
	if e != nil {
		e.actor = a.Actor
		rec.e.Edit = e.audit()
	}
	err = s(ctx, topo.DeadQueue, func(b *Browser) error {
		if err := a.refuseRows(b); err != nil {
			return err
		}
		a.narrow(b)
		r := rules{maxReplays: a.MaxReplays, edit: e, hooks: a.Hooks, actor: a.Actor, rate: a.Rate}
		n, err := replayDead(ctx, b, selection{limit: a.Limit, selects: a.Selects}, r, func(n note) {
			rec.note(n)
			done.Lines = append(done.Lines, n.text())
		})
		done.Replayed, done.Delivered, done.Again, done.Refused = n.replayed, n.delivered, n.again, n.capped+n.refused+n.taken
		done.Rows = b.ingested != nil
		done.NotFound = len(done.Lines) == 0
		if err != nil {
			return err
		}
		done.Arrived, err = arrived(b, n.replayed)
		return err
	})
	if done.NotFound && a.ID != "" {
		rec.notDone(a.ID, "not in claim.dead")
	}
	return done, rec.end(ctx, err)
}

// Purge is the page's purge: purgeDead (into the archive, unless
// a.NoArchive), with its audit entry.
func (a Act) Purge(ctx context.Context, s Session) (Acted, error) {
	var done Acted
	rec, err := begin(ctx, a.Trail, a.Actor, "purge", a.Target, a.Log)
	if err != nil {
		return done, err
	}
	verb := "deleted "
	if !a.NoArchive {
		rec.e.Archive, verb = topo.ArchiveQueue, "archived "
	}
	err = s(ctx, topo.DeadQueue, func(b *Browser) error {
		if err := a.refuseRows(b); err != nil {
			return err
		}
		a.narrow(b)
		if !a.NoArchive {
			rec.e.Archive = b.archiveName()
		}
		if !a.NoArchive && b.ingested == nil {
			// As dlq purge: before anything is touched.
			if err := requireArchive(b.conn); err != nil {
				return err
			}
		}
		n, refused, err := purgeDead(ctx, b, selection{limit: a.Limit, selects: a.Selects}, purging{yes: true,
			archive: !a.NoArchive, actor: a.Actor, hooks: a.Hooks,
			done: func(key string) {
				rec.acted(key)
				done.Lines = append(done.Lines, verb+field(key))
			},
			refused: func(key, why string) {
				rec.notDone(key, why)
				done.Lines = append(done.Lines, field(key)+": not purged: "+why)
			}})
		done.Purged, done.Refused, done.NotFound = n, refused, n+refused == 0
		done.Rows = b.ingested != nil
		if err != nil {
			return err
		}
		done.Arrived, err = arrived(b, n)
		return err
	})
	if done.NotFound && a.ID != "" && err == nil {
		rec.notDone(a.ID, "not in claim.dead")
	}
	return done, rec.end(ctx, err)
}

// Restore is the page's restore: the archived dead letter a.ID back to
// claim.dead, as dlq restore does, with its audit entry.
func (a Act) Restore(ctx context.Context, s Session) (Acted, error) {
	var done Acted
	if a.ID == "" {
		return done, fail.Errorf(fail.Usage, "restore takes one claim (id), not a group")
	}
	rec, err := begin(ctx, a.Trail, a.Actor, "restore", a.Target, a.Log)
	if err != nil {
		return done, err
	}
	err = s(ctx, topo.ArchiveQueue, func(b *Browser) error {
		if err := a.refuseRows(b); err != nil {
			return err
		}
		a.narrow(b)
		n, refused, err := restoreArchived(ctx, b, selection{limit: a.Limit, selects: Named(a.ID)}, a.Actor, a.Hooks, func(key string) {
			rec.acted(key)
			done.Lines = append(done.Lines, "restored "+field(key))
		}, func(key, why string) {
			rec.notDone(key, why)
			done.Lines = append(done.Lines, field(key)+": not restored: "+why)
		})
		done.Restored, done.Refused, done.NotFound = n, refused, n+refused == 0
		done.Rows = b.ingested != nil
		return err
	})
	if done.NotFound && err == nil {
		rec.notDone(a.ID, "not in "+topo.ArchiveQueue)
	}
	return done, rec.end(ctx, err)
}

// CheckEdit checks an edited body as publish checks a claim file, and that
// it stays the same claim: its guid is the dead letter's message_id (or
// guid), since the copy keeps that message_id and the consumer's dedup
// record is filed under it. Only a dead letter that had no usable id (a
// sha256: key) may get one. dlq edit and the page's edit and retry both
// check with it; it returns the body's guid.
func CheckEdit(id string, body []byte) (string, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return "", fmt.Errorf("%w: the body is empty", ErrInvalid)
	}
	if len(body) > MaxBody {
		return "", fmt.Errorf("%w: larger than the %d-byte limit (publish's -max-bytes)", ErrInvalid, MaxBody)
	}
	guid, err := claimid.Guid(body)
	if err != nil {
		return "", fmt.Errorf("%w: not a claim publish would send: %v", ErrInvalid, err)
	}
	if !strings.HasPrefix(id, "sha256:") && guid != id {
		return "", fmt.Errorf("%w: the guid is %q, and must stay %q: the copy keeps its message_id", ErrInvalid, field(guid), field(id))
	}
	return guid, nil
}
