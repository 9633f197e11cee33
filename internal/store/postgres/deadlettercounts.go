package postgres

import (
	"context"
	"slices"

	"eaimq/internal/store/deadletter"

	"github.com/jackc/pgx/v5"
)

// pgMigrate7 keeps the page's group counts as rows change (issue 29:
// the groups view of a million rows, whose GROUP BY read a million
// entries of dead_letters_groups, 0.4 s warm and 1.4 s cold): a table of
// deltas, dead_letter_counts, one row per key (state, reason, status,
// broker_reason) per statement that changed rows of it, filled by
// statement-level triggers from the statement's transition tables (+1
// for each new row, -1 for each old one, zero sums dropped: an UPDATE
// that leaves the four columns alone adds nothing). A key's count is the
// sum of its deltas.
//
// Deltas, inserted only, not a counter row per key updated in place: a
// counter row is locked by its UPDATE until the writer commits, and
// ingest (inserting rows of several keys) and a replay or purge
// (updating the states of rows of several keys) would take the counters
// of their keys in different orders and deadlock. An INSERT locks no row
// another writer waits for. compactDeadLetterCounts folds the deltas
// into one row per key now and then.
//
// The index dead_letters_groups gets dead_at as a key column (it was
// only included): a group's first and last dead-lettering, which deltas
// cannot keep under deletes, are read by a probe of the index at each
// end of the key's entries (pgCountedGroupsSQL).
//
// The triggers are created before the backfill, in this transaction:
// CREATE TRIGGER takes a lock on dead_letters that every write waits
// for, so no row is written between the count of the rows there and the
// first delta a trigger adds.
func pgMigrate7(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `
	CREATE TABLE dead_letter_counts (
		state         text NOT NULL,
		reason        text NOT NULL,
		status        integer NOT NULL,
		broker_reason text NOT NULL,
		n             bigint NOT NULL -- rows added (+) or gone (-) of the key
	);
	CREATE FUNCTION dead_letter_counts_delta() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		-- One branch per event: a transition table exists only in the
		-- trigger that declared it.
		IF TG_OP = 'INSERT' THEN
			INSERT INTO dead_letter_counts (state, reason, status, broker_reason, n)
			SELECT state, reason, status, broker_reason, count(*) FROM new_rows GROUP BY 1, 2, 3, 4;
		ELSIF TG_OP = 'DELETE' THEN
			INSERT INTO dead_letter_counts (state, reason, status, broker_reason, n)
			SELECT state, reason, status, broker_reason, -count(*) FROM old_rows GROUP BY 1, 2, 3, 4;
		ELSIF TG_OP = 'UPDATE' THEN
			INSERT INTO dead_letter_counts (state, reason, status, broker_reason, n)
			SELECT state, reason, status, broker_reason, sum(n) FROM (
				SELECT state, reason, status, broker_reason, 1 AS n FROM new_rows
				UNION ALL
				SELECT state, reason, status, broker_reason, -1 FROM old_rows) AS d
			GROUP BY 1, 2, 3, 4 HAVING sum(n) <> 0;
		ELSE
			-- TRUNCATE: no row is left, and it holds dead_letters alone,
			-- so every delta's writer has committed. The lock waits for a
			-- compaction under way, whose sums the DELETE's snapshot,
			-- taken after it, then sees.
			LOCK TABLE dead_letter_counts IN EXCLUSIVE MODE;
			DELETE FROM dead_letter_counts;
		END IF;
		RETURN NULL;
	END $$;
	CREATE TRIGGER dead_letter_counts_insert AFTER INSERT ON dead_letters
		REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_counts_delta();
	CREATE TRIGGER dead_letter_counts_update AFTER UPDATE ON dead_letters
		REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_counts_delta();
	CREATE TRIGGER dead_letter_counts_delete AFTER DELETE ON dead_letters
		REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_counts_delta();
	CREATE TRIGGER dead_letter_counts_truncate AFTER TRUNCATE ON dead_letters
		FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_counts_delta();
	INSERT INTO dead_letter_counts (state, reason, status, broker_reason, n)
		SELECT state, reason, status, broker_reason, count(*) FROM dead_letters GROUP BY 1, 2, 3, 4;
	DROP INDEX dead_letters_groups;
	CREATE INDEX dead_letters_groups ON dead_letters(state, reason, status, broker_reason, dead_at) INCLUDE (seq);`)
	return err
}

// pgCompactCounts folds the deltas of dead_letter_counts into one row per
// key, in one statement: what it deletes it inserts again, summed, so
// that in any snapshot the sums are the same before and after.
//
// Under READ COMMITTED, against a trigger adding deltas meanwhile: the
// DELETE sees the deltas committed when it began; a trigger's INSERT
// locks no existing row, so neither waits for the other, and a delta
// committed later is not deleted (it is not in the snapshot) and stays.
// Against a second compaction: both delete in the order of a sequential
// scan of the same table (it has no index, and it is far below the size
// at which PostgreSQL starts a scan mid-table to share it); the second, meeting a row the first deleted,
// waits for the first to end, then skips the row (gone), and the rows the
// first inserted are not in its snapshot. Each delta is thus deleted (and
// its sum inserted) by one compaction at most, none is lost or counted
// twice, and the waits go one way (no deadlock). Compactions are also
// rare (pgCompactEvery).
const pgCompactCounts = `WITH d AS (DELETE FROM dead_letter_counts RETURNING state, reason, status, broker_reason, n)
	INSERT INTO dead_letter_counts (state, reason, status, broker_reason, n)
	SELECT state, reason, status, broker_reason, sum(n) FROM d GROUP BY 1, 2, 3, 4 HAVING sum(n) <> 0`

// pgCompactEvery: a writer compacts after this many of its writes to the
// dead letters (each adds a delta row per key it touched: a few), and the
// groups' read compacts when there are more deltas than pgCompactBound.
// Without compaction the read sums every delta ever written: a million
// rows ingested in batches of 200 are 5,000 statements.
const (
	pgCompactEvery = 64
	pgCompactBound = 2000
)

// compactDeadLetterCounts folds the deltas (pgCompactCounts).
func (s *Store) compactDeadLetterCounts(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, pgCompactCounts)
	return err
}

// wroteDeadLetters counts a committed write to the dead letters and
// compacts after the store's first and then every pgCompactEvery: the
// first too, so that short runs (a `dlq ingest` of a few batches, a
// replay) each fold what the runs before them left, when the page reads
// the counts without compacting (opened read-only). A compaction that
// fails is not the write's failure (the write is committed, and its
// counts are right without one): the next write tries again, as its
// count stays due.
func (s *Store) wroteDeadLetters(ctx context.Context) {
	if n := s.deltaWrites.Add(1); n > 1 && n <= pgCompactEvery {
		return
	}
	if err := s.compactDeadLetterCounts(context.WithoutCancel(ctx)); err == nil {
		s.deltaWrites.Store(1)
	}
}

// pgKeptShape: q is what the page's groups view asks (Browser.RowGroups:
// the states it reads, through the last seq at its start), the one shape
// the kept counts answer. Any other condition (a reason, a status, an id,
// words, a group) selects rows within a key, which the counts do not
// hold: GroupsSQL counts those, from the rows, as before.
func pgKeptShape(q deadletter.Query) bool {
	return q.After == 0 && q.Limit == 0 && len(q.IDs) == 0 && q.Reason == "" && q.Status == 0 && q.BrokerReason == "" &&
		q.GUID == "" && q.Text == "" && q.Group == "" && q.Contains == ""
}

// pgCountedGroupsSQL is GroupsSQL's answer for a query of pgKeptShape,
// from the kept counts: each key's deltas summed, less the key's rows
// after Through (the rows ingested since the page's snapshot: few, read
// from dead_letters_state's (state, seq), so that the counts are the
// rows through Through exactly, as GroupsSQL's are), then each key's
// first and last dead_at by one probe of dead_letters_groups at each end
// of its entries (the groups are tens: some dozen probes, not a million
// entries). One statement, so one snapshot: a delta and its rows commit
// together, so the sums are the rows that snapshot sees. states is the
// condition of the states; after that of the rows after Through and
// through that of the probes' rows up to it ("" both without a Through).
func pgCountedGroupsSQL(states, after, through string) string {
	late := ""
	if after != "" {
		late = `UNION ALL SELECT state, reason, status, broker_reason, -count(*) FROM dead_letters
			WHERE ` + states + ` AND ` + after + ` GROUP BY 1, 2, 3, 4`
		through = " AND " + through
	}
	probe := func(order string) string {
		return `(SELECT dead_at FROM dead_letters d WHERE d.state = k.state AND d.reason = k.reason AND d.status = k.status
			AND d.broker_reason = k.broker_reason AND d.dead_at IS NOT NULL` + through + ` ORDER BY d.dead_at ` + order + ` LIMIT 1)`
	}
	return `WITH k AS (SELECT state, reason, status, broker_reason, sum(n) AS n
			FROM (SELECT state, reason, status, broker_reason, n FROM dead_letter_counts WHERE ` + states + ` ` + late + `) AS d
			GROUP BY 1, 2, 3, 4 HAVING sum(n) > 0)
		SELECT ` + deadletter.GroupColumns + `, CAST(sum(n) AS BIGINT), min(first), max(last)
		FROM (SELECT k.*, ` + probe("ASC") + ` AS first, ` + probe("DESC") + ` AS last FROM k) AS probed
		GROUP BY 1, 2`
}

// countedGroups reads the groups of a query of pgKeptShape from the kept
// counts (pgCountedGroupsSQL).
func (s *Store) countedGroups(ctx context.Context, q deadletter.Query) ([]deadletter.Group, error) {
	if err := s.compactIfMany(ctx); err != nil {
		return nil, err
	}
	states, after, through, args := keptConds(q)
	rows, err := s.pool.Query(ctx, pgCountedGroupsSQL(states, after, through), args...)
	if err != nil {
		return nil, err
	}
	return scanGroups(rows)
}

// countedRows is CountDeadLetters of a query of pgKeptShape from the kept
// counts: the deltas of its states summed, less its rows after Through,
// in one statement (one snapshot, as pgCountedGroupsSQL). The page's
// counts (its refresh every few seconds, a group page's total) and
// ingestion's bound ask this of every row there is: a million rows cost
// the server a scan of a million index entries each time, 0.4 to 1.4 s,
// and the kept counts a few rows.
func (s *Store) countedRows(ctx context.Context, q deadletter.Query) (int64, error) {
	if err := s.compactIfMany(ctx); err != nil {
		return 0, err
	}
	states, after, _, args := keptConds(q)
	late := ""
	if after != "" {
		late = ` UNION ALL SELECT -count(*) FROM dead_letters WHERE ` + states + ` AND ` + after
	}
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT CAST(coalesce(sum(n), 0) AS BIGINT) FROM
		(SELECT n FROM dead_letter_counts WHERE `+states+late+`) AS d`, args...).Scan(&n)
	return n, err
}

// compactIfMany compacts the deltas if there are more than pgCompactBound
// (and the store may write), so that a read never sums an unbounded
// table.
func (s *Store) compactIfMany(ctx context.Context) error {
	if s.readOnly {
		return nil
	}
	var many bool
	if err := s.pool.QueryRow(ctx, `SELECT count(*) > $1 FROM (SELECT 1 FROM dead_letter_counts LIMIT $1 + 1) AS bounded`,
		pgCompactBound).Scan(&many); err != nil {
		return err
	}
	if !many {
		return nil
	}
	return s.compactDeadLetterCounts(ctx)
}

// keptConds are a query of pgKeptShape's conditions on the kept counts
// and the rows: its states (states; "TRUE" for all), its rows after
// Through (after, on dead_letters) and through it (through, on
// dead_letters d; both "" without a Through), and their arguments.
func keptConds(q deadletter.Query) (states, after, through string, args []any) {
	arg := func(v any) string { args = append(args, v); return pgDollar(len(args)) }
	states = "TRUE"
	if len(q.States) > 0 {
		ss := make([]string, len(q.States))
		for i, st := range q.States {
			ss[i] = string(st)
		}
		slices.Sort(ss)
		states = "state = ANY(" + arg(ss) + "::text[])"
	}
	if q.Through > 0 {
		n := arg(q.Through)
		after, through = "seq > "+n, "d.seq <= "+n
	}
	return states, after, through, args
}
