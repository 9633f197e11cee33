package dlq

import (
	"context"
	"fmt"
	"io"

	"eaimq/internal/fail"
)

// Purge is the command: with c.Yes it deletes the selected dead letters
// and names each, and writes the audit entry; without, it names what it
// would delete and returns a usage error (purge needs -yes).
func Purge(ctx context.Context, b *Browser, c Config, w, stderr io.Writer) error {
	rec := &record{}
	if c.Yes {
		var err error
		if rec, err = begin(ctx, c.Audit, c.Actor, "purge", target(c), stderr); err != nil {
			return err
		}
	}
	f := newFilter(c)
	n, err := purgeDead(ctx, b, f.selection(), c.Yes, func(key string) {
		if c.Yes {
			rec.acted(key)
			fmt.Fprintf(w, "deleted %s\n", field(key))
		} else {
			fmt.Fprintf(w, "would delete %s\n", field(key))
		}
	})
	if err != nil {
		if c.Yes {
			fmt.Fprintf(w, "purged %d dead letter(s) before the error\n", n)
			return rec.end(ctx, err)
		}
		return err
	}
	missing := f.missing(stderr, b)
	quorumWarning(b, stderr)
	if !c.Yes {
		return fail.Errorf(fail.Usage, "purge would delete %d dead letter(s); add -yes to delete them", n)
	}
	fmt.Fprintf(w, "purged %d dead letter(s)\n", n)
	f.unnamedTo(rec)
	if err := rec.end(ctx, nil); err != nil {
		return err
	}
	if missing > 0 {
		return fail.Errorf(fail.Failed, "%d named ID(s) naming no single dead letter", missing)
	}
	return nil
}

// purgeDead deletes the selected dead letters (with yes; without, it only
// names them) and calls deleted with each key. It is the one purge of this
// program: dlq purge and dlq serve's purge go through it.
func purgeDead(ctx context.Context, b *Browser, sel selection, yes bool, deleted func(key string)) (int, error) {
	n := 0
	del := func(m *dead) error {
		if yes {
			// Acking a dead letter is deleting it.
			if err := m.d.Ack(false); err != nil {
				return fail.New(fail.Unavailable, fmt.Errorf("ack %s: %w", field(m.Key), err))
			}
		}
		deleted(m.Key)
		n++
		return nil
	}
	err := b.walk(ctx, sel.limit, func(m *dead) (bool, error) {
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
	return n, err
}
