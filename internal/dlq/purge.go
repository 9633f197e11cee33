package dlq

import (
	"context"
	"fmt"
	"io"

	"eaimq/internal/fail"
)

// Purge is the command: with c.Yes it deletes the selected dead letters
// and names each; without, it names what it would delete and returns a
// usage error (purge needs -yes).
func Purge(ctx context.Context, b *Browser, c Config, w, stderr io.Writer) error {
	f := newFilter(c)
	n, err := purgeDead(ctx, b, f.selection(), c.Yes, func(key string) {
		if c.Yes {
			fmt.Fprintf(w, "deleted %s\n", field(key))
		} else {
			fmt.Fprintf(w, "would delete %s\n", field(key))
		}
	})
	if err != nil {
		if c.Yes {
			fmt.Fprintf(w, "purged %d dead letter(s) before the error\n", n)
		}
		return err
	}
	missing := f.missing(stderr, b)
	if !c.Yes {
		return fail.Errorf(fail.Usage, "purge would delete %d dead letter(s); add -yes to delete them", n)
	}
	fmt.Fprintf(w, "purged %d dead letter(s)\n", n)
	if missing > 0 {
		return fail.Errorf(fail.Failed, "%d named ID(s) not in claim.dead", missing)
	}
	return nil
}

// purgeDead deletes the selected dead letters (with yes; without, it only
// names them) and calls deleted with each key. It is the one purge of this
// program: dlq purge and dlq serve's purge go through it.
func purgeDead(ctx context.Context, b *Browser, sel selection, yes bool, deleted func(key string)) (int, error) {
	n := 0
	err := b.walk(ctx, sel.limit, func(m *dead) (bool, error) {
		if !sel.selects(m) {
			return true, nil
		}
		if yes {
			// Acking a dead letter is deleting it.
			if err := m.d.Ack(false); err != nil {
				return false, fail.New(fail.Unavailable, fmt.Errorf("ack %s: %w", field(m.Key), err))
			}
		}
		deleted(m.Key)
		n++
		return true, nil
	})
	return n, err
}
