// Package deadletter is the row of a dead letter ingested into the store's
// database (dlq ingest), as both backends keep it and dlq reads it: one
// type, so that SQLite and PostgreSQL cannot disagree about what a row
// holds.
package deadletter

import (
	"strconv"
	"strings"
	"time"
)

// Row is one dead-lettered copy: the message as claim.dead held it and
// what the consumer had recorded of its claim when it was ingested.
type Row struct {
	Seq int64 // the row's place, in the order of ingestion (keyset paging)
	// CopyKey says which dead-lettered copy this is (dlq's copyKey): the
	// same copy delivered twice, or dead-lettered twice by the broker,
	// has the same key and is one row.
	CopyKey   string
	MessageID string // the dead letter's key: message_id, else guid, else sha256: (claim.Key)
	ClaimID   string
	GUID      string
	// What the consumer recorded, when the row was ingested: the reason's
	// word ("unknown" without a record), the last HTTP status (0: none),
	// the answer or the error, the partner calls, and the whole record
	// as JSON (nil: none).
	Reason   string
	Status   int
	Answer   string
	Attempts int
	Record   []byte
	// From x-death: when, and the broker's reason (rejected,
	// delivery_limit, ...).
	DeadAt       time.Time
	BrokerReason string
	// The message: its properties and headers (dlq's typed JSON) and body.
	Properties []byte
	Headers    []byte
	Body       []byte
	// Raw is why the message could not be read ("" when it could): then
	// Properties and Headers hold what could be kept, Body is as it came.
	Raw        string
	IngestedAt time.Time
	// What became of it (dlq replay, purge, restore): its state, and
	// who changed it last, through what, and when (zero: never changed).
	State    State
	StateBy  string
	StateVia string
	StateAt  time.Time
}

// State is what became of an ingested dead letter. A row is written
// StateDead; replay moves it to StateReplaying before it publishes (the
// claim that makes two replays of one row send it once) and to
// StateReplayed after the broker's confirm; purge moves it to StatePurged
// (the archive) and restore back to StateDead.
type State string

const (
	StateDead      State = "dead"
	StateReplaying State = "replaying"
	StateReplayed  State = "replayed"
	StatePurged    State = "purged"
)

// Live are the states of a dead letter still to be dealt with, as
// claim.dead holds them: what list and the page show by default. A row
// left replaying by a crash is among them, so that it is not taken for
// gone.
var Live = []State{StateDead, StateReplaying}

// Query selects rows, in Seq order: those after After, at most Limit (0:
// all). IDs (none: any) select a row whose MessageID or ClaimID is one of
// them. Reason ("": any) and Status (0: any, -1: none on record) are the
// columns; BrokerReason ("": any) is x-death's reason.
type Query struct {
	After        int64
	Limit        int
	IDs          []string
	Reason       string
	Status       int
	BrokerReason string
	// GUID ("": any) is the body's guid; Text ("": any) narrows to the
	// rows whose body has each of its words (TextWords), by the words
	// table: HasText decides.
	GUID string
	Text string
	// Group ("": any) selects the rows of one of the page's groups
	// (Groups): its word, and GroupStatus.
	Group       string
	GroupStatus int
	// Contains ("": any) selects the rows whose message_id or claim_id
	// holds it, letter case aside (the page's search box: a part of an
	// id). No index finds a part of a string: one pass over the indexes
	// of the two columns.
	Contains string
	// States (none: any) are the states selected.
	States []State
	// Through (0: none) is the last seq selected: a bulk action fixes
	// its selection when it starts, so rows ingested meanwhile (a claim
	// that fails again after its replay) are not swept in.
	Through int64
	// Lean reads the rows without their properties and body (both
	// empty), for a walk that reads neither (list: LeanColumns).
	Lean bool
}

// TextCond is a backend's condition for rows whose body has each of
// words (not empty), its arguments made by arg: the index of words that
// narrows a -text.
type TextCond func(words []string, arg func(any) string) string

// Where is the query's condition and its arguments, for a backend whose
// placeholders ph(n) makes (? or $n) and whose index of words text reads:
// one reading of a query for both.
func (q Query) Where(ph func(n int) string, text TextCond) (string, []any) {
	var conds []string
	var args []any
	arg := func(v any) string { args = append(args, v); return ph(len(args)) }
	words := TextWords(q.Text)
	// With words, +seq: the range on seq is then no index's (the unary
	// plus), so that SQLite reads the rows the words table names rather
	// than every row of the range, checking each against the words: a
	// search is for a few among many. PostgreSQL plans by its statistics
	// either way.
	seq := "seq"
	if len(words) > 0 {
		seq = "+seq"
	}
	if q.After > 0 {
		// Not "seq > 0" for the first page or a count of all: SQLite
		// then walks the table itself (its rows, bodies and all: a
		// million took seconds) where count(*) alone reads its smallest
		// index.
		conds = append(conds, seq+" > "+arg(q.After))
	}
	if len(q.IDs) > 0 {
		var ors []string
		for _, id := range q.IDs {
			ors = append(ors, "message_id = "+arg(id), "claim_id = "+arg(id))
		}
		conds = append(conds, "("+strings.Join(ors, " OR ")+")")
	}
	if q.Reason != "" {
		conds = append(conds, "reason = "+arg(q.Reason))
	}
	switch {
	case q.Status < 0:
		conds = append(conds, "status = 0")
	case q.Status > 0:
		conds = append(conds, "status = "+arg(q.Status))
	}
	if q.BrokerReason != "" {
		conds = append(conds, "broker_reason = "+arg(q.BrokerReason))
	}
	if q.Through > 0 {
		conds = append(conds, seq+" <= "+arg(q.Through))
	}
	if q.GUID != "" {
		conds = append(conds, "guid = "+arg(q.GUID))
	}
	if len(words) > 0 {
		conds = append(conds, text(words, arg))
	}
	if q.Contains != "" {
		// Each column read from its own index (message_id, seq) and
		// (claim_id, seq), a covering scan of a few dozen bytes an entry,
		// not the rows (in SQLite a million rows' first pages: 3 s a
		// pass, against the indexes' 0.3 s). Its argument twice: SQLite's
		// ? is a new argument each time.
		like := "%" + likeEscaper.Replace(strings.ToLower(q.Contains)) + "%"
		conds = append(conds, `seq IN (SELECT seq FROM dead_letters WHERE lower(message_id) LIKE `+arg(like)+` ESCAPE '\'
			UNION SELECT seq FROM dead_letters WHERE lower(claim_id) LIKE `+arg(like)+` ESCAPE '\')`)
	}
	switch {
	case q.Group == GroupCrashLoop:
		conds = append(conds, "broker_reason = "+arg(deliveryLimit))
	case q.Group != "":
		conds = append(conds, "broker_reason <> "+arg(deliveryLimit), "reason = "+arg(q.Group), "status = "+arg(q.GroupStatus))
	}
	if len(q.States) > 0 {
		// With a narrower condition (an id, a guid, words, a reason, a
		// status, a group), the state is checked on the rows it finds,
		// not read from the index on (state, seq): SQLite, without
		// statistics (no ANALYZE: the store runs none), took that index
		// for the IDs of a show too, and read the million rows of the
		// live states one by one for the one claim (3.9 s where the
		// index of claimIds took some ms). "state || ''" is no index's,
		// in SQLite and in PostgreSQL alike (the unary plus is SQLite's
		// only, for text).
		state := "state"
		if len(q.IDs) > 0 || q.GUID != "" || len(words) > 0 || q.Reason != "" || q.Status != 0 || q.BrokerReason != "" || q.Group != "" || q.Contains != "" {
			state = "state || ''"
		}
		conds = append(conds, state+" IN ("+list(q.States, func(v any) string { return arg(string(v.(State))) })+")")
	}
	if len(conds) == 0 {
		return "TRUE", nil
	}
	return strings.Join(conds, " AND "), args
}

func list[T any](vs []T, arg func(any) string) string {
	ps := make([]string, len(vs))
	for i, v := range vs {
		ps[i] = arg(v)
	}
	return strings.Join(ps, ", ")
}

// Change moves rows from one state to another: those of Seqs that are in
// one of From, or (StaleBefore not zero) replaying since before
// StaleBefore. By, Via and At say who, through what and when. To ""
// deletes the rows instead (purge -no-archive).
//
// The condition on the state is the point: the UPDATE is one atomic
// statement, so of two operators changing one row only the first finds it
// in From, and the second changes nothing; a backend returns the seqs it
// changed, and only those are acted on.
type Change struct {
	Seqs        []int64
	From        []State
	To          State
	By, Via     string
	At          time.Time
	StaleBefore time.Time
}

// Where is the change's condition and its arguments, for a backend whose
// placeholders ph(n) makes and whose state_at at(t) writes (unix ms, or a
// timestamptz): one reading of a change for both.
func (c Change) Where(ph func(n int) string, at func(time.Time) any, args []any) (string, []any) {
	arg := func(v any) string { args = append(args, v); return ph(len(args)) }
	seqs := make([]any, len(c.Seqs))
	for i, s := range c.Seqs {
		seqs[i] = s
	}
	// The seqs first: with ? placeholders the arguments go in the
	// order of the text.
	in := "seq IN (" + list(seqs, arg) + ")"
	states := "state IN (" + list(c.From, func(v any) string { return arg(string(v.(State))) }) + ")"
	if len(c.From) == 0 {
		states = "false"
	}
	if !c.StaleBefore.IsZero() {
		states = "(" + states + " OR (state = " + arg(string(StateReplaying)) + " AND state_at < " + arg(at(c.StaleBefore)) + "))"
	}
	return in + " AND " + states, args
}

// Set is the change's SET clause and its arguments, the first of a
// statement whose WHERE follows (Where, with these args).
func (c Change) Set(ph func(n int) string, at func(time.Time) any) (string, []any) {
	var args []any
	arg := func(v any) string { args = append(args, v); return ph(len(args)) }
	return "state = " + arg(string(c.To)) + ", state_by = " + arg(c.By) + ", state_via = " + arg(c.Via) + ", state_at = " + arg(at(c.At)), args
}

// Prune is the condition of the rows the retention drops: in one of
// states since before before.
func Prune(states []State, before time.Time, ph func(n int) string, at func(time.Time) any) (string, []any) {
	var args []any
	arg := func(v any) string { args = append(args, v); return ph(len(args)) }
	return "state IN (" + list(states, func(v any) string { return arg(string(v.(State))) }) + ") AND state_at < " + arg(at(before)), args
}

// CountSQL is the query of how many rows where selects, at most limit of
// them (0: all). Bounded, the count reads at most limit index entries and
// stops: an exact count reads every one (a million took 0.25 s in SQLite,
// most of a `dlq -limit 50 list`), and a bound is all "more than N"
// needs.
func CountSQL(where string, limit int) string {
	if limit <= 0 {
		return `SELECT count(*) FROM dead_letters WHERE ` + where
	}
	return `SELECT count(*) FROM (SELECT 1 FROM dead_letters WHERE ` + where + ` LIMIT ` + strconv.Itoa(limit) + `) AS bounded`
}

// Columns are the table's columns in Row's order after Seq, for INSERT
// and SELECT alike.
const Columns = `copy_key, message_id, claim_id, guid, reason, status, answer, attempts, record,
	dead_at, broker_reason, properties, headers, body, raw, ingested_at`

// LeanColumns are Columns for a SELECT of q, in the same order: with
// q.Lean, the properties and the body are empty (emptyBytes is the
// backend's empty blob), not read. A whole list prints neither, and
// each row's were copied out of the database (a KiB or more a row, a
// million rows) only to be dropped.
func LeanColumns(q Query, emptyBytes string) string {
	if !q.Lean {
		return Columns
	}
	r := strings.NewReplacer(" properties,", " '' AS properties,", " body,", " "+emptyBytes+" AS body,")
	c := r.Replace(Columns)
	if strings.Count(c, " AS ") != 2 {
		panic("deadletter: LeanColumns does not match Columns")
	}
	return c
}

// StateColumns are the columns of what became of a row, in Row's order
// after Columns' (the schema step after the table's added them).
const StateColumns = `state, state_by, state_via, state_at`

// The page's groups: the rows by the reason a person reads first (the
// reason on record, or GroupCrashLoop for a dead letter the broker's
// delivery limit dead-lettered, whatever the record says) and the last
// status on record (0 for crash-loop): dlq's groupOf, in SQL, so that
// the groups of a million rows are one GROUP BY, not a million rows read.
const (
	GroupCrashLoop = "crash-loop"
	deliveryLimit  = "delivery_limit"
)

// Group is one group's count and its first and last dead-lettering.
type Group struct {
	Word        string
	Status      int
	Count       int64
	First, Last time.Time
}

// GroupColumns are the page's group of a row, or of rows counted by
// (reason, status, broker_reason): its word and its status (word, st),
// the select list's first two columns of GroupsSQL and of a backend's
// other reading of the groups.
const GroupColumns = `CASE WHEN broker_reason = '` + deliveryLimit + `' THEN '` + GroupCrashLoop + `' ELSE reason END AS word,
		CASE WHEN broker_reason = '` + deliveryLimit + `' THEN 0 ELSE status END AS st`

// GroupsSQL is the query of the groups of the rows where selects (a
// Query's Where), one row a group: word, status, count, min and max
// dead_at.
//
// The rows are counted by their columns first (state, reason, status,
// broker_reason: the order of the index dead_letters_groups, which also
// holds dead_at and seq), then those counts merged into the page's groups
// by the CASEs: grouped by the CASEs directly, the database read every
// row of the table (a million of 1.2 KB: 13 to 22 s in SQLite, 6 s in
// PostgreSQL, at load 9) and sorted them; by the index's columns it reads
// the index alone, in its order (0.3 s of CPU in SQLite, 0.6 s of EXPLAIN ANALYZE in
// PostgreSQL, for the million).
func GroupsSQL(where string) string {
	return `SELECT ` + GroupColumns + `, CAST(sum(n) AS BIGINT), min(first), max(last)
		FROM (SELECT reason, status, broker_reason, count(*) AS n, min(dead_at) AS first, max(dead_at) AS last
			FROM dead_letters WHERE ` + where + ` GROUP BY state, reason, status, broker_reason) AS counted
		GROUP BY 1, 2`
}

// likeEscaper escapes LIKE's wildcards (and its escape character) in a
// string to be found as it is.
var likeEscaper = strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`)
