package dlqcli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"eaimq/internal/dlq"
	"eaimq/internal/fail"
)

// Row is one dead letter as list -json prints it (one line each) and as
// show -json begins. Its JSON has every field on every row, null where
// there is none (Go's zero values stand for those here; MarshalJSON
// writes them as null), so that a script can read any field of any row.
type Row struct {
	MessageID  string    // the key: message_id, else guid, else sha256:
	ClaimID    string    // the body's claimId
	DeadAt     time.Time // x-death time
	FromQueue  string    // x-death queue
	Broker     string    // x-death reason: rejected, delivery_limit, expired, maxlen
	Count      int64     // x-death count (with Broker)
	CrashLoop  bool      // Broker is delivery_limit
	Reason     string    // the reason on record, as its word ("unknown" without one)
	DeadReason string    // the recorded sentence
	Recorded   bool      // the store has a record
	State      string
	Status     int    // the partner's last HTTP status (0: none)
	Excerpt    string // the partner's last answer, or the error when there was none
	Attempts   int    // partner calls on record (with Recorded)
	OurReason  string // for people: status or error, and the sentence
	Replays    int64  // x-eaimq-replays
	Deliveries int64  // x-delivery-count, when claim.dead is a quorum queue (HasDeliveries)
	Edit       *dlq.Edited
	Purged     *dlq.Purged // x-eaimq-purged, for a dead letter of the archive

	hasDeath, hasDeliveries bool
}

// rowJSON is Row's one shape (docs: dlq's manual).
type rowJSON struct {
	MessageID  string      `json:"message_id"`
	ClaimID    *string     `json:"claim_id"`
	DeadAt     *time.Time  `json:"dead_lettered_at"`
	FromQueue  *string     `json:"from_queue"`
	Broker     *string     `json:"broker_reason"`
	Count      *int64      `json:"broker_count"`
	CrashLoop  bool        `json:"crash_loop"`
	Reason     string      `json:"reason"`
	DeadReason *string     `json:"dead_reason"`
	Recorded   bool        `json:"recorded"`
	State      *string     `json:"state"`
	Status     *int        `json:"status"`
	Excerpt    *string     `json:"excerpt"`
	Attempts   *int        `json:"attempts"`
	OurReason  string      `json:"our_reason"`
	Replays    int64       `json:"replays"`
	Deliveries *int64      `json:"deliveries"`
	Edit       *dlq.Edited `json:"edit"`
	Purged     *dlq.Purged `json:"purged"`
}

// MarshalJSON writes every field, null where there is none.
func (r Row) MarshalJSON() ([]byte, error) {
	j := rowJSON{MessageID: r.MessageID, ClaimID: null(r.ClaimID), DeadAt: nullTime(r.DeadAt), FromQueue: null(r.FromQueue),
		Broker: null(r.Broker), CrashLoop: r.CrashLoop, Reason: r.Reason, DeadReason: null(r.DeadReason), Recorded: r.Recorded,
		State: null(r.State), Excerpt: null(r.Excerpt), OurReason: r.OurReason, Replays: r.Replays, Edit: r.Edit, Purged: r.Purged}
	if r.hasDeath {
		j.Count = &r.Count
	}
	if r.hasDeliveries {
		j.Deliveries = &r.Deliveries
	}
	if r.Recorded {
		j.Attempts = &r.Attempts
	}
	if r.Status != 0 {
		j.Status = &r.Status
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads a row MarshalJSON wrote (a null is the zero value).
func (r *Row) UnmarshalJSON(b []byte) error {
	var j rowJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Row{MessageID: j.MessageID, ClaimID: deref(j.ClaimID), DeadAt: deref(j.DeadAt), FromQueue: deref(j.FromQueue),
		Broker: deref(j.Broker), Count: deref(j.Count), CrashLoop: j.CrashLoop, Reason: j.Reason, DeadReason: deref(j.DeadReason),
		Recorded: j.Recorded, State: deref(j.State), Status: deref(j.Status), Excerpt: deref(j.Excerpt), Attempts: deref(j.Attempts),
		OurReason: j.OurReason, Replays: j.Replays, Deliveries: deref(j.Deliveries), Edit: j.Edit, Purged: j.Purged,
		hasDeath: j.Count != nil, hasDeliveries: j.Deliveries != nil}
	return nil
}

func deref[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}

func toRow(m *dlq.Dead) Row {
	r := Row{MessageID: m.Key, ClaimID: m.ClaimID, DeadAt: m.DeadAt, FromQueue: m.FromQueue, Broker: m.Broker,
		Count: m.Count, CrashLoop: m.CrashLoop(), Reason: m.Reason().String(), DeadReason: m.Sentence(), Recorded: m.Known,
		OurReason: m.OurReason(), Replays: m.Replays, Deliveries: m.Deliveries, Edit: m.Edit, Purged: m.Purged,
		hasDeath: m.HasDeath, hasDeliveries: m.HasDeliveries || hasHeader(m, "x-delivery-count")}
	if m.Known {
		r.State, r.Status, r.Excerpt, r.Attempts = string(m.Rec.State), m.Rec.LastStatus, m.Rec.LastError, m.Rec.Attempts
	}
	return r
}

func hasHeader(m *dlq.Dead, name string) bool { _, ok := m.Delivery().Headers[name]; return ok }

// The table's columns: their widths, and the heading.
const tableFormat = "%-38s %-14s %-19s %-9s %-17s %-5s %-6s %-32s %s\n"

var tableHead = []any{"MESSAGE_ID", "CLAIM_ID", "DEAD-LETTERED (UTC)", "FROM", "BROKER", "CALLS", "STATUS", "ANSWER", "REASON"}

// List prints the selected dead letters on w, as a table or (c.JSON) one
// JSON object a line, and consumes nothing.
func List(ctx context.Context, b *dlq.Browser, c dlq.Config, stdout, stderr io.Writer) error {
	// Buffered: 100,000 rows are 100,000 writes to a terminal or a pipe
	// otherwise. Flushed before anything goes to stderr, so that the two
	// stay in order on a terminal.
	w := bufio.NewWriterSize(stdout, 64<<10)
	defer w.Flush()
	b.MoreBound = listMoreBound
	b.Lean = true // the table and the JSON rows print the model's fields only
	if b.Rows() && os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		// A walk of the ingested rows holds a page of them (2,000 rows
		// read lean: a few MiB) and allocates for every row, so with
		// the default GOGC the heap's goal is a few MiB, and a whole
		// list of a million collected hundreds of times: 1.5 to 2 s of
		// its 12 s of CPU (A/B of GOGC=100 and 400 in process, two runs
		// each). At 400 the heap may grow to five times what is live;
		// the soft limit keeps it within listMemLimit whatever is live
		// (peak RSS, issue 29: ≤ 64 MiB; at 400 without it PostgreSQL's
		// list peaked at 59.9 MiB). The queue's walk, which holds
		// messages, keeps the defaults.
		defer debug.SetGCPercent(debug.SetGCPercent(listGCPercent))
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(listMemLimit))
	}
	n := 0
	if !c.JSON {
		fmt.Fprintf(w, tableFormat, tableHead...)
	}
	var line []byte // one table line, its space kept from row to row
	err := b.Walk(ctx, c, func(m *dlq.Dead) error {
		n++
		if c.JSON {
			return dlq.WriteJSON(w, toRow(m))
		}
		line = appendTableRow(line[:0], m)
		w.Write(line) // an error stays in w: its Flush returns it
		return nil
	})
	if err != nil {
		return err
	}
	more, wk := "", b.Walked()
	if u := wk.Unlooked; u > 0 {
		more = fmt.Sprintf("; %s more in %s not looked at (%s)", unlookedText(wk), wk.Source, wk.Cut)
		if c.JSON && !wk.Bounded { // else BoundNote says it
			w.Flush()
			fmt.Fprintf(stderr, "dlq: %s more dead letter(s) in %s not looked at (-limit %d)\n", unlookedText(wk), wk.Source, c.Limit)
		}
	}
	switch {
	case c.JSON:
	case b.Rows():
		fmt.Fprintf(w, "%d dead letter(s) listed of %d looked at%s, from %s\n", n, wk.Looked, more, wk.Source)
	default:
		fmt.Fprintf(w, "%d dead letter(s) listed of %d looked at%s; %s keeps them all\n", n, wk.Looked, more, wk.Source)
	}
	if err := w.Flush(); err != nil {
		return fail.New(fail.IO, err)
	}
	dlq.QuorumWarning(b, stderr)
	return nil
}

// listGCPercent and listMemLimit are the GC's percent and the Go
// runtime's soft memory limit while list walks the ingested rows.
const (
	listGCPercent = 400
	listMemLimit  = 32 << 20
)

// listMoreBound is as far as list counts the ingested dead letters a
// -limit left out: past it the last line says "over 10000 more". The
// exact number cost a count of every row (0.25 s of a million in SQLite,
// where the 50 rows of a -limit 50 took a few ms); the queue's walk knows
// claim.dead's depth without counting, and says it exactly.
var listMoreBound = 10_000 // a var: tests lower it

// unlookedText is how many a walk left out, for people: "over N" when
// the count stopped at its bound (MoreBound).
func unlookedText(wk dlq.Walked) string {
	if wk.Over {
		return fmt.Sprintf("over %d", wk.Unlooked)
	}
	return strconv.Itoa(wk.Unlooked)
}

// appendTableRow appends one line of list's table to line: every field
// from the message or the partner escaped and clipped to its column, each
// column as tableFormat pads it (the heading's). Appended rather than
// written by fmt.Fprintf: a whole list is a million lines, and fmt's
// boxing of nine arguments and its padding were 1.7 of 13 s of CPU
// (pprof); TestTableRowAsFormat holds the two to the same bytes.
func appendTableRow(line []byte, m *dlq.Dead) []byte {
	for i, col := range tableCells(m) {
		if i > 0 {
			line = append(line, ' ')
		}
		line = append(line, col...)
		// %-Ns: padded with spaces to N runes; the last column is not.
		for n := utf8.RuneCountInString(col); n < tableWidths[i]; n++ {
			line = append(line, ' ')
		}
	}
	return append(line, '\n')
}

// tableWidths are tableFormat's widths, column by column (0: none).
var tableWidths = [...]int{38, 14, 19, 9, 17, 5, 6, 32, 0}

// tableCells are m's columns in list's table.
func tableCells(m *dlq.Dead) [9]string {
	when := "-"
	if !m.DeadAt.IsZero() {
		when = m.DeadAt.UTC().Format("2006-01-02 15:04:05")
	}
	brk := "-"
	if m.HasDeath {
		brk = dlq.OrDash(m.Broker)
		if m.Count > 1 {
			brk += " x" + strconv.FormatInt(m.Count, 10)
		}
	}
	calls, status, answer := "-", "-", "-"
	if m.Known {
		calls = strconv.Itoa(m.Rec.Attempts)
		if m.Rec.LastStatus != 0 {
			status = strconv.Itoa(m.Rec.LastStatus)
		}
		if m.Rec.LastError != "" {
			answer = answerOf(m.Rec.LastError)
		}
	}
	why := m.Why()
	if p := m.Purged; p != nil {
		// In the archive: when it was purged and by whom comes first.
		why = "purged " + p.At.UTC().Format(time.DateTime) + " by " + dlq.OrDash(p.By) + "; " + why
	}
	if p := m.Replaying; p != nil {
		// Its copy may be out: a person must see it before replaying.
		why = "replaying since " + p.At.UTC().Format(time.DateTime) + " by " + dlq.OrDash(p.By) + "; " + why
	}
	return [9]string{cell(m.Key, 38), cell(dlq.OrDash(m.ClaimID), 14), when, cell(dlq.OrDash(m.FromQueue), 9),
		cell(brk, 17), calls, status, cell(answer, 32), cell(why, 140)}
}

// answerOf is what a person reads first of the partner's answer: the
// message of a JSON error body ({"error": "documents missing"}), else the
// answer as it is.
func answerOf(s string) string {
	if !strings.HasPrefix(s, "{") {
		return s
	}
	var body struct{ Error, Message, Detail, Title, Reason any }
	if json.Unmarshal([]byte(s), &body) == nil {
		for _, v := range []any{body.Error, body.Message, body.Detail, body.Title, body.Reason} {
			if v, ok := v.(string); ok && v != "" {
				return v
			}
		}
	}
	return s
}
