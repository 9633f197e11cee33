package sqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"eaimq/internal/store/deadletter"
)

// searches are the selections list and the page make that an index must
// serve: by claimId or message_id, guid, reason, status, text in the
// body, and the archive (a state), each a keyset page.
var searches = map[string]deadletter.Query{
	"claimId": {IDs: []string{"C-7"}, States: deadletter.Live, Through: 1000, Limit: 500},
	"guid":    {GUID: "g-7", States: deadletter.Live, Through: 1000, Limit: 500},
	"reason":  {Reason: "rejected", States: deadletter.Live, Through: 1000, Limit: 500},
	"status":  {Status: 422, States: deadletter.Live, Through: 1000, Limit: 500},
	"text":    {Text: "BUSY-7 documents", States: deadletter.Live, Through: 1000, Limit: 500},
	"archive": {States: []deadletter.State{deadletter.StatePurged}, Through: 1000, Limit: 500},
	"keyset":  {After: 500, States: deadletter.Live, Through: 1000, Limit: 500},
}

// TestDeadLetterSearchesUseIndexes: EXPLAIN QUERY PLAN of each search
// over a table of 2,000 rows (ANALYZEd) reads it by an index, never a
// scan of dead_letters or of its words; and the search finds what it
// should.
func TestDeadLetterSearchesUseIndexes(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "processed.db"), Options{})
	var rows []deadletter.Row
	for i := range 2000 {
		reason, status := "rejected", 422
		if i%2 == 1 {
			reason, status = "failed-twice", 503
		}
		rows = append(rows, deadletter.Row{CopyKey: fmt.Sprint("copy-", i), MessageID: fmt.Sprint("g-", i), ClaimID: fmt.Sprint("C-", i),
			GUID: fmt.Sprint("g-", i), Reason: reason, Status: status, Properties: []byte("{}"), Headers: []byte("{}"),
			Body: []byte(fmt.Sprintf(`{"guid":"g-%d","claimId":"BUSY-%d","docs":[],"note":"documents missing"}`, i, i)), IngestedAt: time.Now()})
	}
	if _, err := s.PutDeadLetters(ctx, rows); err != nil {
		t.Fatal(err)
	}
	// The archive: a tenth of them purged, as a store that purges some.
	if _, err := s.db.ExecContext(ctx, "UPDATE dead_letters SET state = 'purged' WHERE seq % 10 = 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.ExecContext(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	for name, q := range searches {
		where, args := q.Where(qmark, textMatch)
		plan, err := s.db.QueryContext(ctx, `EXPLAIN QUERY PLAN `+rowsSQL(deadletter.Columns, where, q.Limit), args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var steps []string
		for plan.Next() {
			var id, parent, unused int
			var detail string
			if err := plan.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			steps = append(steps, detail)
		}
		plan.Close()
		text := strings.Join(steps, "\n")
		t.Logf("%s:\n%s", name, text)
		// The FTS4 table's plan is a SCAN of a virtual table whose index
		// says how: 0 reads it all, 1 by docid, 2 and over a full-text
		// query (its index of words).
		if strings.Contains(text, "SCAN dead_letters") || strings.Contains(text, "VIRTUAL TABLE INDEX 0:") {
			t.Errorf("%s scans a table:\n%s", name, text)
		}
	}
	// The page's groups: counted from their index alone, in its order
	// (no temporary B-tree for the rows' GROUP BY, no read of the table).
	where, args := deadletter.Query{States: deadletter.Live, Through: 1000}.Where(qmark, textMatch)
	var steps []string
	plan, err := s.db.QueryContext(ctx, `EXPLAIN QUERY PLAN `+deadletter.GroupsSQL(where), args...)
	if err != nil {
		t.Fatal(err)
	}
	for plan.Next() {
		var id, parent, unused int
		var detail string
		if err := plan.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, detail)
	}
	plan.Close()
	if text := strings.Join(steps, "\n"); !strings.Contains(text, "USING COVERING INDEX dead_letters_groups") ||
		strings.Count(text, "TEMP B-TREE") > 1 {
		t.Errorf("the groups are not counted from their index alone, in its order:\n%s", text)
	}
	got, err := s.DeadLetters(ctx, searches["text"])
	if err != nil || len(got) != 1 || got[0].MessageID != "g-7" {
		t.Errorf("-text BUSY-7 documents: %d rows %v", len(got), err)
	}
	// A row's words go with it.
	if _, err := s.ChangeDeadLetters(ctx, deadletter.Change{Seqs: []int64{got[0].Seq}, From: deadletter.Live}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.DeadLetters(ctx, searches["text"]); err != nil || len(got) != 0 {
		t.Errorf("the deleted row is still found by its words: %d rows %v", len(got), err)
	}
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM dead_letter_text WHERE dead_letter_text MATCH '"busy"'`).Scan(&n); err != nil || n != 1999 {
		t.Errorf("%d rows of the word busy in the index, want 1999 (%v)", n, err)
	}
}

// TestMigratesDeadLettersOfVersion6: a file of version 6, its dead
// letters ingested before states and words existed, becomes version 7
// with each row dead and findable by the words of its body.
func TestMigratesDeadLettersOfVersion6(t *testing.T) {
	path, db, tx := fileAtVersion(t, 6)
	for _, q := range []string{
		`INSERT INTO dead_letters (copy_key, message_id, reason, properties, headers, body, ingested_at)
			VALUES ('c1', 'old-1', 'rejected', '{}', '{}', '{"guid":"old-1","claimId":"BUSY-9"}', 1)`,
		`PRAGMA user_version = 6`,
	} {
		if _, err := tx.Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s := open(t, path, Options{})
	got, err := s.DeadLetters(ctx, deadletter.Query{Text: "busy-9", States: deadletter.Live})
	if err != nil || len(got) != 1 || got[0].MessageID != "old-1" || got[0].State != deadletter.StateDead {
		t.Fatalf("the version 6 row after the migration: %+v %v", got, err)
	}
}

// fileAtVersion is a new store file at schema version v (its first v
// migrations), in a transaction left open for the test's rows of that
// version.
func fileAtVersion(t *testing.T, v int) (string, *sql.DB, *sql.Tx) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "processed.db")
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations[:v] {
		if err := m(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	return path, db, tx
}
