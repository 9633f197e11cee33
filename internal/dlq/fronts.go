package dlq

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"eaimq/internal/audit"
	"eaimq/internal/store"
)

// What the front packages (internal/dlqcli's commands; the page's backend)
// read of the engine beyond its commands: a walk of the selected dead
// letters, what the walk looked at, and the one escaping rule for what of a
// message reaches a person. They are in one file so that the engine's own
// files stay as they were when the fronts moved out.

// Walk calls fn for each dead letter c selects (its IDs, -status, -reason,
// -guid, -text), among the first c.Limit b looks at (0: all), and consumes
// nothing: what fn is handed goes back to its queue when b closes.
func (b *Browser) Walk(ctx context.Context, c Config, fn func(*Dead) error) error {
	f := newFilter(c)
	b.narrowTo(c)
	return b.walk(ctx, c.Limit, func(m *dead) (bool, error) {
		if !f.selects(m) {
			return true, nil
		}
		return true, fn(m)
	})
}

// Walked is what a walk looked at, for the line that ends a listing.
type Walked struct {
	Source   string // the queue walked, or IngestedSource / IngestedArchive
	Rows     bool   // Source is the store's ingested rows, not a queue
	Looked   int    // dead letters looked at
	Unlooked int    // dead letters -limit or -max-held left out
	Bounded  bool   // the walk stopped at -max-held (BoundNote says so)
	Cut      string // the flag that left Unlooked out ("-limit 50")
}

// Walked says what b's walks looked at so far.
func (b *Browser) Walked() Walked {
	return Walked{Source: b.queue, Rows: b.ingested != nil, Looked: b.looked, Unlooked: b.unlooked(), Bounded: b.bounded, Cut: b.cut()}
}

// Store is the store b reads the records from (nil: none).
func (b *Browser) Store() store.Store { return b.store }

// QuorumWarning warns, after a walk, when claim.dead counts the walks: a
// quorum queue raises a message's x-delivery-count each time a walk gives
// it back, and RabbitMQ 4 drops (claim.dead has no dead-letter exchange) a
// message past the queue's delivery limit, 20 by default.
func QuorumWarning(b *Browser, w io.Writer) {
	if b.deliveries < quorumWarnAt || !atLeast4(b.version) {
		return
	}
	fmt.Fprintf(w, "dlq: warning: claim.dead is a quorum queue and a dead letter in it has been delivered %d times: "+
		"every walk (list, show, replay, purge, a page of dlq serve) counts one, and RabbitMQ %s drops a message past the "+
		"queue's delivery limit (20 unless set). Set claim.dead's delivery limit to -1 (unlimited: a policy with "+
		"\"delivery-limit\": -1), and replay or purge what is there\n", b.deliveries, b.version)
}

// quorumWarnAt is the delivery count that warns: half the default limit.
const quorumWarnAt = 10

// atLeast4 says whether a RabbitMQ version string is 4.0 or later.
func atLeast4(v string) bool {
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	return err == nil && n >= 4
}

// The escaping rule (text.go) under the names the fronts call it by; the
// engine's files call it by its own lowercase names.

// FieldWidth and BodyWidth are where text output clips a field and a body.
const (
	FieldWidth = fieldWidth
	BodyWidth  = bodyWidth
)

// Esc returns s with every character a terminal could act on escaped;
// with keepLines, newlines and tabs stay.
func Esc(s string, keepLines bool) string { return esc(s, keepLines) }

// Clip cuts s to n bytes, saying how much it left out.
func Clip(s string, n int) string { return clip(s, n) }

// Field is one field from a message for a person: escaped, clipped to
// FieldWidth.
func Field(s string) string { return field(s) }

// OrDash is s, or "-" for none.
func OrDash(s string) string { return orDash(s) }

// ShellWord quotes an id for a command line a person may paste.
func ShellWord(id string) string { return shellWord(id) }

// Scalar is a header value that is not a table or a list, as text.
func Scalar(v any) string { return scalar(v) }

// WriteJSON writes v as one line of JSON, escaped as text is (text.go).
func WriteJSON(w io.Writer, v any) error { return writeJSON(w, v) }

// ActedWord says what an audit entry did to the dead letters it names
// ("archived in claim.dead.archive", "replayed"): history's text and the
// page's events say it alike.
func ActedWord(e audit.Entry) string {
	switch e.Action {
	case "purge":
		if e.Archive != "" {
			return "archived in " + e.Archive
		}
		return "deleted"
	case "restore":
		return "restored to claim.dead"
	case "edit":
		return "edited and replayed"
	}
	return "replayed"
}
