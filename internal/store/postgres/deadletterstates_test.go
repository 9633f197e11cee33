package postgres

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"eaimq/internal/pgtest"
	"eaimq/internal/store/deadletter"
)

// searches are the selections list and the page make that an index must
// serve, as SQLite's test has them.
var searches = map[string]deadletter.Query{
	"claimId": {IDs: []string{"C-7"}, States: deadletter.Live, Through: 1000, Limit: 500},
	"guid":    {GUID: "g-7", States: deadletter.Live, Through: 1000, Limit: 500},
	"reason":  {Reason: "rejected", States: deadletter.Live, Through: 1000, Limit: 500},
	"status":  {Status: 422, States: deadletter.Live, Through: 1000, Limit: 500},
	"text":    {Text: "BUSY-7 documents", States: deadletter.Live, Through: 1000, Limit: 500},
	"archive": {States: []deadletter.State{deadletter.StatePurged}, Through: 1000, Limit: 500},
	"keyset":  {After: 500, States: deadletter.Live, Through: 1000, Limit: 500},
}

// TestDeadLetterSearchesUseIndexes: EXPLAIN of each search, with
// sequential scans disabled (the planner then scans only what no index
// serves; on a small table it would scan by choice), reads dead_letters
// and its words by indexes; and the search finds what it should.
func TestDeadLetterSearchesUseIndexes(t *testing.T) {
	s := openStore(t, pgtest.New(t), Options{})
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
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, q := range []string{"UPDATE dead_letters SET state = 'purged' WHERE seq % 10 = 0", "ANALYZE", "SET enable_seqscan = off"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for name, q := range searches {
		where, args := pgWhere(q)
		plan, err := conn.Query(ctx, `EXPLAIN SELECT seq, `+deadletter.Columns+`, `+deadletter.StateColumns+
			` FROM dead_letters WHERE `+where+` ORDER BY seq LIMIT `+strconv.Itoa(q.Limit), args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var steps []string
		for plan.Next() {
			var line string
			if err := plan.Scan(&line); err != nil {
				t.Fatal(err)
			}
			steps = append(steps, line)
		}
		plan.Close()
		text := strings.Join(steps, "\n")
		t.Logf("%s:\n%s", name, text)
		if strings.Contains(text, "Seq Scan") {
			t.Errorf("%s scans a table:\n%s", name, text)
		}
	}
	// The page's groups: counted from their index alone (an index-only
	// scan: the table's rows are not read).
	where, args := pgWhere(deadletter.Query{States: deadletter.Live, Through: 1000})
	if _, err := conn.Exec(ctx, "VACUUM dead_letters"); err != nil { // the visibility map, as autovacuum sets it
		t.Fatal(err)
	}
	plan, err := conn.Query(ctx, `EXPLAIN `+deadletter.GroupsSQL(where), args...)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for plan.Next() {
		var line string
		if err := plan.Scan(&line); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, line)
	}
	plan.Close()
	if text := strings.Join(steps, "\n"); !strings.Contains(text, "Index Only Scan using dead_letters_groups") {
		t.Errorf("the groups are not counted from their index alone:\n%s", text)
	}
	if _, err := conn.Exec(ctx, "RESET enable_seqscan"); err != nil {
		t.Fatal(err)
	}
	got, err := s.DeadLetters(ctx, searches["text"])
	if err != nil || len(got) != 1 || got[0].MessageID != "g-7" {
		t.Errorf("-text BUSY-7 documents: %d rows %v", len(got), err)
	}
}

// TestMigratesDeadLettersOfVersion4: a database of version 4, its dead
// letters ingested before states, words and the groups' index existed,
// becomes this code's version with each row dead, findable by the words
// of its body, by its claimId and in its group, as SQLite's test has it
// for a file.
func TestMigratesDeadLettersOfVersion4(t *testing.T) {
	loc := pgtest.New(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE eaimq_schema (one boolean PRIMARY KEY DEFAULT true CHECK (one), version integer NOT NULL);
		INSERT INTO eaimq_schema (version) VALUES (4)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range pgMigrations[:4] {
		if err := m(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if _, err := tx.Exec(ctx, `INSERT INTO dead_letters (copy_key, message_id, claim_id, reason, status, properties, headers, body, ingested_at)
			VALUES ($1, $2, $3, 'rejected', 422, '{}', '{}', $4, now())`,
			fmt.Sprintf("c%d", i), fmt.Sprintf("old-%d", i), fmt.Sprintf("BUSY-%d", i), fmt.Sprintf(`{"guid":"old-%d","claimId":"BUSY-%d"}`, i, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	s := openStore(t, loc, Options{})
	var v int
	if err := s.pool.QueryRow(ctx, `SELECT version FROM eaimq_schema`).Scan(&v); err != nil || v != pgSchemaVersion {
		t.Fatalf("schema version %d after the migration, want %d (%v)", v, pgSchemaVersion, err)
	}
	got, err := s.DeadLetters(ctx, deadletter.Query{Text: "busy-1", States: deadletter.Live})
	if err != nil || len(got) != 1 || got[0].MessageID != "old-1" || got[0].State != deadletter.StateDead {
		t.Fatalf("a version 4 row by the words of its body after the migration: %+v %v", got, err)
	}
	if got, err := s.DeadLetters(ctx, deadletter.Query{IDs: []string{"BUSY-2"}, States: deadletter.Live}); err != nil || len(got) != 1 || got[0].MessageID != "old-2" {
		t.Errorf("a version 4 row by its claimId: %+v %v", got, err)
	}
	groups, err := s.DeadLetterGroups(ctx, deadletter.Query{States: deadletter.Live})
	if err != nil || len(groups) != 1 || groups[0].Word != "rejected" || groups[0].Status != 422 || groups[0].Count != 3 {
		t.Errorf("the version 4 rows' groups: %+v %v", groups, err)
	}
	sameAllGroups(t, s, "migrated") // the kept counts, filled by the migration
}
