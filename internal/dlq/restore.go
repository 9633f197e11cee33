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

// Restore is the command: it moves the archived dead letters c.IDs names
// from claim.dead.archive (b walks it) back to claim.dead, each confirmed
// there before it leaves the archive, names each, and writes the audit
// entry. A named ID not in the archive, or the claimId of several, is a
// failure (exit 1), as for the other commands.
func Restore(ctx context.Context, b *Browser, c Config, stdout, stderr io.Writer) error {
	rec, err := begin(ctx, c.Audit, c.Actor, "restore", target(c), stderr)
	if err != nil {
		return err
	}
	f := newFilter(c)
	b.narrowTo(c)
	n, refused, err := restoreArchived(ctx, b, f.selection(), c.Actor, c.Hooks, func(key string) {
		rec.acted(key)
		fmt.Fprintf(stdout, "restored %s\n", field(key))
	}, func(key, why string) {
		rec.notDone(key, why)
		fmt.Fprintf(stderr, "dlq: %s: not restored: %s\n", field(key), why)
	})
	if err != nil {
		fmt.Fprintf(stdout, "restored %d dead letter(s) before the error\n", n)
		return rec.end(ctx, err)
	}
	to := topo.DeadQueue
	if b.ingested != nil {
		to = IngestedSource
	}
	fmt.Fprintf(stdout, "restored %d dead letter(s) to %s\n", n, to)
	missing := f.missing(stderr, b)
	f.unnamedTo(rec, b)
	if err := rec.end(ctx, nil); err != nil {
		return err
	}
	if missing+refused > 0 {
		return fail.Errorf(fail.Failed, "%d named ID(s) naming no single purged dead letter, %d not restored", missing, refused)
	}
	return nil
}

// restoreArchived moves the selected messages of the archive (b) back to
// claim.dead, as they were before their purge. It is the one restore of
// this program: dlq restore and dlq serve's restore go through it.
func restoreArchived(ctx context.Context, b *Browser, sel selection, actor Actor, hooks Hooks, done func(string), refused func(key, why string)) (n, refuses int, err error) {
	if b.ingested != nil {
		// Ingested: the purged row becomes dead again, as it was.
		n, err = changeRows(ctx, b, sel, deadletter.Change{From: []deadletter.State{deadletter.StatePurged}, To: deadletter.StateDead,
			By: actor.Who, Via: actor.Via}, done, func(key string) {
			refuses++
			refused(key, "another operator restored it first")
		})
		return n, refuses, err
	}
	mv, closeMv, err := newMover(b, queueDest(topo.DeadQueue), func(m *dead) amqp.Publishing { return restored(m) })
	if err != nil {
		return 0, 0, err
	}
	defer closeMv()
	mv.moved, mv.refused, mv.hooks = done, refused, hooks
	err = moveSelected(ctx, b, sel, mv, mv.take)
	return mv.n, mv.refuses, err
}
