package dlq

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/audit"
	"eaimq/internal/fail"
	"eaimq/internal/store"
	"eaimq/internal/store/deadletter"
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
	Total    int    // what the source held when the walk started (rows: Looked, unless -limit cut the walk)
	Looked   int    // dead letters looked at
	Unlooked int    // dead letters -limit or -max-held left out
	Bounded  bool   // the walk stopped at -max-held (BoundNote says so)
	Over     bool   // Unlooked is a lower bound: the count stopped at MoreBound
	Cut      string // the flag that left Unlooked out ("-limit 50")
}

// Walked says what b's walks looked at so far.
func (b *Browser) Walked() Walked {
	return Walked{Source: b.queue, Total: b.total, Looked: b.looked, Unlooked: b.unlooked(), Bounded: b.bounded, Over: b.over, Cut: b.cut()}
}

// Each calls fn for each dead letter b looks at, at most limit (0: all),
// selected by nothing: the page counts groups and pages of its own. fn
// returns false to stop.
func (b *Browser) Each(ctx context.Context, limit int, fn func(*Dead) (bool, error)) error {
	return b.walk(ctx, limit, fn)
}

// Rows says whether b reads the store's ingested rows, not a queue.
func (b *Browser) Rows() bool { return b.ingested != nil }

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

// Clip shortens s to n characters, ending it with "…".
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

// RowGroup is one group of the ingested rows (the page's groups): how many
// rows, the first and last dead-lettered, and its first dead letters.
type RowGroup struct {
	Select      RowSelect // the group's word and status: RowPage's pages of it
	Count       int
	First, Last time.Time
	Dead        []*Dead // at most RowGroups' listed
}

// RowGroups counts the groups of the ingested rows b reads in one GROUP BY
// (the page's grouping by Word and status, in SQL: deadletter.GroupsSQL;
// PostgreSQL sums the counts it keeps instead, through the same last
// seq), then reads each group's first listed dead letters: a million rows
// cost the database a count, and this process a page a group, not a
// million rows read through the model.
func (b *Browser) RowGroups(ctx context.Context, listed int) ([]RowGroup, error) {
	last, err := b.ingested.LastDeadLetterSeq(ctx)
	if err != nil {
		return nil, fail.Errorf(fail.IO, "read the ingested dead letters: %v", err)
	}
	q := deadletter.Query{States: b.states, Through: last}
	groups, err := b.ingested.DeadLetterGroups(ctx, q)
	if err != nil {
		return nil, fail.Errorf(fail.IO, "count the groups of the ingested dead letters: %v", err)
	}
	var out []RowGroup
	for _, g := range groups {
		q.Group, q.GroupStatus, q.Limit = g.Word, g.Status, listed
		rows, err := b.ingested.DeadLetters(ctx, q)
		if err != nil {
			return nil, fail.Errorf(fail.IO, "read the ingested dead letters of group %s: %v", g.Word, err)
		}
		if len(rows) == 0 {
			continue // gone since the count
		}
		rg := RowGroup{Select: RowSelect{Word: g.Word, Status: g.Status}, Count: int(g.Count), First: g.First.UTC(), Last: g.Last.UTC()}
		for _, r := range rows {
			rg.Dead = append(rg.Dead, deadOfRow(r))
		}
		out = append(out, rg)
	}
	return out, nil
}

// RowOf is the row dlq ingest writes for d, read at now: what a test or a
// bulk fill writes to be read back as ingestion's.
func RowOf(d amqp.Delivery, now time.Time) deadletter.Row { return rowOf(parse(d, false), now) }

// BodySHA256 is a body's sha256 in hex, as an edit's previous body is
// compared with it (Act.Edit's previous): the page shows it beside the
// form and sends it back.
func BodySHA256(body []byte) string { return sha256hex(body) }

// RowSelect is what a page of the ingested rows shows: one of the page's
// groups (Word, Status: deadletter.Query's Group and GroupStatus), or the
// rows whose message_id or claimId holds Contains (letter case aside).
type RowSelect struct {
	Word     string
	Status   int
	Contains string
}

// RowPage is one page of the ingested rows RowPage selects.
type RowPageOf struct {
	Count int     // the rows selected
	Total int     // the rows b reads (its states) there were
	Dead  []*Dead // the page's
}

// RowPage is the dead letters from..from+n-1 (counted from 0, in the
// order they were ingested) of the ingested rows b reads that sel
// selects, with how many it selects and how many rows there are, among
// the rows there were when it started. The page's group pages and its
// search, by the store's queries: a group by its index, a search in one
// pass of SQL over two columns, not every row read through the model
// (over a million rows, the walk of a group page took as long as a whole
// `dlq list`).
func (b *Browser) RowPage(ctx context.Context, sel RowSelect, from, n int) (RowPageOf, error) {
	var p RowPageOf
	last, err := b.ingested.LastDeadLetterSeq(ctx)
	if err != nil || last == 0 {
		return p, ioErr(err)
	}
	all := deadletter.Query{States: b.states, Through: last}
	total, err := b.ingested.CountDeadLetters(ctx, all)
	if err != nil {
		return p, ioErr(err)
	}
	q := all
	q.Group, q.GroupStatus, q.Contains = sel.Word, sel.Status, sel.Contains
	count, err := b.ingested.CountDeadLetters(ctx, q)
	if err != nil {
		return p, ioErr(err)
	}
	p.Count, p.Total = int(count), int(total)
	// The rows before from are read (in pages, by seq) but not made into
	// dead letters: a page deep in a group costs the reads, not the model.
	seen := 0
	for len(p.Dead) < n && seen < p.Count {
		q.Limit = rowsPage
		rows, err := b.ingested.DeadLetters(ctx, q)
		if err != nil {
			return RowPageOf{}, ioErr(err)
		}
		for _, r := range rows {
			if seen >= from && len(p.Dead) < n {
				p.Dead = append(p.Dead, deadOfRow(r))
			}
			seen++
		}
		if len(rows) < q.Limit {
			break
		}
		q.After = rows[len(rows)-1].Seq
	}
	return p, nil
}

// ioErr is a failed read of the ingested rows, as the fronts report it
// (nil stays nil).
func ioErr(err error) error {
	if err == nil {
		return nil
	}
	return fail.Errorf(fail.IO, "read the ingested dead letters: %v", err)
}
