package dlq

import (
	"context"
	"fmt"
	"io"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/fail"
	"eaimq/internal/store/deadletter"
	"eaimq/internal/topo"
)

// archiveName is where b's purge keeps what it purges: claim.dead.archive,
// or the store's archive where dead letters are ingested.
func (b *Browser) archiveName() string {
	if b.ingested != nil {
		return IngestedArchive
	}
	return topo.ArchiveQueue
}

// Purge is the command: with c.Yes it moves the selected dead letters to
// the archive (or, with c.NoArchive, deletes them) and names each, and
// writes the audit entry; without, it names what it would do and returns
// a usage error (purge needs -yes).
func Purge(ctx context.Context, b *Browser, c Config, w, stderr io.Writer) error {
	if !c.NoArchive && b.ingested == nil {
		// Before the audit entry and the walk: nothing is touched.
		if err := requireArchive(b.conn); err != nil {
			return err
		}
	}
	b.narrowTo(c)
	verb, would := "archived", "would archive"
	if c.NoArchive {
		verb, would = "deleted", "would delete"
	}
	rec := &record{}
	if c.Yes {
		var err error
		if rec, err = begin(ctx, c.Audit, c.Actor, "purge", target(c), stderr); err != nil {
			return err
		}
		if !c.NoArchive {
			rec.e.Archive = b.archiveName()
		}
	}
	f := newFilter(c)
	n, refused, err := purgeDead(ctx, b, f.selection(), purging{yes: c.Yes, archive: !c.NoArchive, actor: c.Actor, hooks: c.Hooks,
		done: func(key string) {
			if c.Yes {
				rec.acted(key)
				fmt.Fprintf(w, "%s %s\n", verb, field(key))
			} else {
				fmt.Fprintf(w, "%s %s\n", would, field(key))
			}
		},
		refused: func(key, why string) {
			rec.notDone(key, why)
			fmt.Fprintf(stderr, "dlq: %s: not purged: %s\n", field(key), why)
		}})
	if err != nil {
		if c.Yes {
			fmt.Fprintf(w, "purged %d dead letter(s) before the error\n", n)
			return rec.end(ctx, err)
		}
		return err
	}
	missing := f.missing(stderr, b)
	QuorumWarning(b, stderr)
	if !c.Yes {
		return fail.Errorf(fail.Usage, "purge would %s %d dead letter(s); add -yes to do it", map[bool]string{true: "delete", false: "archive"}[c.NoArchive], n)
	}
	if c.NoArchive {
		fmt.Fprintf(w, "purged %d dead letter(s)\n", n)
	} else {
		fmt.Fprintf(w, "purged %d dead letter(s) into %s (dlq restore ID brings one back)\n", n, b.archiveName())
	}
	f.unnamedTo(rec, b)
	if err := rec.end(ctx, nil); err != nil {
		return err
	}
	if missing+refused > 0 {
		return fail.Errorf(fail.Failed, "%d named ID(s) naming no single dead letter, %d not archived", missing, refused)
	}
	return nil
}

// purging is how one purge goes.
type purging struct {
	yes     bool  // really: without, it only names what it selects
	archive bool  // move to the archive, else delete for good
	actor   Actor // who purges, for the archive's header
	hooks   Hooks
	done    func(key string)      // each archived, deleted (or, without yes, selected)
	refused func(key, why string) // each the archive did not take
}

// purgeDead archives (or deletes) the selected dead letters. It is the one
// purge of this program: dlq purge and dlq serve's purge go through it.
func purgeDead(ctx context.Context, b *Browser, sel selection, p purging) (n, refused int, err error) {
	if b.ingested != nil && p.yes {
		// Ingested: purge is a state of the row (the archive), or with
		// -no-archive its deletion. A row another operator replayed or
		// purged first is refused, not purged twice.
		c := deadletter.Change{From: []deadletter.State{deadletter.StateDead}, To: deadletter.StatePurged, By: p.actor.Who, Via: p.actor.Via}
		if !p.archive {
			c.To = ""
		}
		n, err = changeRows(ctx, b, sel, c, p.done, func(key string) {
			refused++
			p.refused(key, "it is being replayed, or another operator replayed or purged it first")
		})
		return n, refused, err
	}
	if p.yes && p.archive {
		mv, closeMv, err := newMover(b, queueDest(topo.ArchiveQueue), func(m *dead) amqp.Publishing { return archived(m, p.actor) })
		if err != nil {
			return 0, 0, err
		}
		defer closeMv()
		mv.moved, mv.refused, mv.hooks = p.done, p.refused, p.hooks
		err = moveSelected(ctx, b, sel, mv, mv.take)
		return mv.n, mv.refuses, err
	}
	del := func(m *dead) error {
		if p.yes {
			// Acking a dead letter is deleting it.
			if err := m.d.Ack(false); err != nil {
				return fail.New(fail.Unavailable, fmt.Errorf("ack %s: %w", field(m.Key), err))
			}
		}
		p.done(m.Key)
		n++
		return nil
	}
	err = b.walk(ctx, sel.limit, func(m *dead) (bool, error) {
		if !sel.selects(m) {
			return true, nil
		}
		return true, del(m)
	})
	for _, m := range sel.after() {
		if err == nil {
			err = del(m)
		}
	}
	return n, 0, err
}
