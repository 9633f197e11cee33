package dlq

import (
	"eaimq/internal/store/deadletter"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// StatusNone is Config.Status for -status none: the dead letters with no
// HTTP status on record (no answer at all, or no record).
const StatusNone = -1

// maxCandidates is how many dead letters with one claimId an ambiguous ID
// lists.
const maxCandidates = 10

// filter is what one command selects: Config's IDs and filters, and which
// of the IDs some dead letter answered to.
//
// An ID names a dead letter by its key or message_id; an ID that names
// none that way and is the claimId of exactly one dead letter names that
// one. Which is known only when the walk has seen every dead letter, so the
// claimId matches are kept aside (candidates) and taken at the end
// (resolved); one that is the claimId of several names none of them, and
// missing lists them.
type filter struct {
	Config
	found      map[string]bool    // the IDs a dead letter answered to
	candidates map[string][]*dead // by ID: dead letters whose claimId it is, the first maxCandidates
	counts     map[string]int     // by ID: how many dead letters have it as claimId
}

func newFilter(c Config) *filter {
	return &filter{Config: c, found: map[string]bool{}, candidates: map[string][]*dead{}, counts: map[string]int{}}
}

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
			f.notice(m)
			return false
		}
	}
	return f.passes(m)
}

// notice keeps m aside when an ID is its claimId (and the filters pass it).
func (f *filter) notice(m *dead) {
	if m.ClaimID == "" || !f.passes(m) {
		return
	}
	for i, id := range f.IDs {
		if id != m.ClaimID || slices.Index(f.IDs, id) != i {
			continue // another ID, or the same ID named twice
		}
		f.counts[id]++
		if len(f.candidates[id]) < maxCandidates {
			f.candidates[id] = append(f.candidates[id], m)
		}
	}
}

// passes applies the filters (-status, -reason) to m.
func (f *filter) passes(m *dead) bool {
	switch {
	case f.Status == StatusNone && m.Known && m.Rec.LastStatus != 0:
		return false
	case f.Status > 0 && (!m.Known || m.Rec.LastStatus != f.Status):
		return false
	case f.CrashLoop && !m.CrashLoop():
		return false
	case f.ByReason && m.Reason() != f.Reason:
		return false
	case f.GUID != "" && guidOf(m.d.Body) != f.GUID:
		return false
	case f.Text != "" && !deadletter.HasText(m.d.Body, f.Text):
		return false
	}
	return true
}

// resolved returns, once the walk has ended, the dead letters named only
// by their claimId: one for each ID that no key or message_id answered to
// and that is the claimId of exactly one dead letter.
func (f *filter) resolved() []*dead {
	var out []*dead
	for _, id := range f.IDs {
		if f.found[id] || f.counts[id] != 1 {
			continue
		}
		f.found[id] = true
		out = append(out, f.candidates[id][0])
	}
	return out
}

// missing reports the named IDs no dead letter answered to, and those that
// are the claimId of several, on w; it returns their number.
func (f *filter) missing(w io.Writer, b *Browser) int {
	blocks := f.unnamed(b)
	for _, s := range blocks {
		fmt.Fprintf(w, "dlq: %s\n", s)
	}
	return len(blocks)
}

// unnamed says, for each named ID that names no dead letter, why: none
// answers to it, or it is the claimId of several (listed).
func (f *filter) unnamed(b *Browser) []string {
	var out []string
	for i, id := range f.IDs {
		if f.found[id] || slices.Index(f.IDs, id) != i {
			continue
		}
		c := f.counts[id]
		if c <= 1 {
			out = append(out, fmt.Sprintf("no dead letter with id or claimId %q in %s%s", clip(esc(id, false), fieldWidth), b.queue, b.beyond()))
			continue
		}
		var s strings.Builder
		fmt.Fprintf(&s, "%q is the claimId of %d dead letters%s; name one by its message_id:", field(id), c, b.beyond())
		for _, m := range f.candidates[id] {
			fmt.Fprintf(&s, "\n  %s", candidateLine(m))
		}
		if c > len(f.candidates[id]) {
			fmt.Fprintf(&s, "\n  ... and %d more (dlq list shows them all)", c-len(f.candidates[id]))
		}
		out = append(out, s.String())
	}
	return out
}

// unnamedTo puts the IDs that named no single dead letter of b's queue in
// the audit entry as not done.
func (f *filter) unnamedTo(r *record, b *Browser) {
	for i, id := range f.IDs {
		if f.found[id] || slices.Index(f.IDs, id) != i {
			continue
		}
		why := "not in " + b.queue
		if c := f.counts[id]; c > 1 {
			why = fmt.Sprintf("the claimId of %d dead letters", c)
		}
		r.notDone(id, why)
	}
}

// candidateLine is one of several dead letters with one claimId.
func candidateLine(m *dead) string {
	when := "-"
	if !m.DeadAt.IsZero() {
		when = m.DeadAt.UTC().Format(time.DateTime)
	}
	parts := []string{field(m.Key), "dead-lettered " + when, m.Word()}
	if m.Known && m.Rec.LastStatus != 0 {
		parts = append(parts, fmt.Sprint(m.Rec.LastStatus))
	}
	if m.edited() {
		parts = append(parts, "edited")
	}
	return strings.Join(parts, "  ")
}

// selection is what one replay or purge acts on: the dead letters of a
// walk of at most limit (0: all) that selects accepts, and at its end
// those resolved returns (nil: none).
type selection struct {
	limit    int
	selects  func(*dead) bool
	resolved func() []*dead
}

func (f *filter) selection() selection { return selection{f.Limit, f.selects, f.resolved} }

// after is what the selection adds at the end of the walk.
func (s selection) after() []*dead {
	if s.resolved == nil {
		return nil
	}
	return s.resolved()
}

// Named selects the dead letter id, as the command line's IDs do.
func Named(id string) func(*Dead) bool {
	return func(m *dead) bool { return id == m.Key || id == m.d.MessageId }
}
