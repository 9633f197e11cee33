package dlq

import (
	"fmt"
	"io"
)

// filter is what one command selects: Config's IDs and filters, and which
// of the IDs some dead letter answered to.
type filter struct {
	Config
	found map[string]bool
}

func newFilter(c Config) *filter { return &filter{Config: c, found: map[string]bool{}} }

// selects says whether m is selected by IDs and the filters, and notes
// which named ID it answers to.
func (f *filter) selects(m *dead) bool {
	if len(f.IDs) > 0 {
		named := false
		for _, id := range f.IDs {
			if id == m.Key || id == m.d.MessageId {
				f.found[id], named = true, true
			}
		}
		if !named {
			return false
		}
	}
	if f.Status != 0 && (!m.Known || m.Rec.LastStatus != f.Status) {
		return false
	}
	if f.ByReason && m.reason() != f.Reason {
		return false
	}
	return true
}

// missing reports the named IDs no dead letter answered to, on w, and
// returns their number.
func (f *filter) missing(w io.Writer, b *Browser) int {
	n := 0
	for _, id := range f.IDs {
		if !f.found[id] {
			n++
			fmt.Fprintf(w, "dlq: no dead letter with id %q in claim.dead%s\n", clip(esc(id, false), fieldWidth), b.beyond())
		}
	}
	return n
}

// selection is what one replay or purge acts on: the dead letters of a
// walk of at most limit (0: all) that selects accepts.
type selection struct {
	limit   int
	selects func(*dead) bool
}

func (f *filter) selection() selection { return selection{f.Limit, f.selects} }

// named selects the dead letter id, as the command line's IDs do.
func named(id string) func(*dead) bool {
	return func(m *dead) bool { return id == m.Key || id == m.d.MessageId }
}
