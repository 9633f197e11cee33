package postgres

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"eaimq/internal/pgtest"
	"eaimq/internal/store/deadletter"
)

// countKeys are the keys the tests' rows spread over: reasons, statuses
// and broker reasons, the crash-loop group's among them (two keys of one
// group).
var countKeys = []struct {
	reason, broker string
	status         int
}{
	{"rejected", "rejected", 422}, {"failed-twice", "rejected", 503}, {"unknown", "rejected", 0},
	{"rejected", "delivery_limit", 422}, {"unknown", "delivery_limit", 0}, {"rejected", "expired", 422},
}

// countRows are n rows from seed's keys and times, some without a
// dead_at (NULL: the group's first and last ignore them).
func countRows(prefix string, n int, r *rand.Rand) []deadletter.Row {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := make([]deadletter.Row, n)
	for i := range rows {
		k := countKeys[r.IntN(len(countKeys))]
		id := fmt.Sprintf("%s-%d", prefix, i)
		rows[i] = deadletter.Row{CopyKey: "copy-" + id, MessageID: id, ClaimID: "C-" + id, Reason: k.reason, Status: k.status,
			BrokerReason: k.broker, Properties: []byte("{}"), Headers: []byte("{}"), Body: []byte(`{"guid":"` + id + `"}`), IngestedAt: time.Now()}
		if r.IntN(10) > 0 {
			rows[i].DeadAt = base.Add(time.Duration(r.IntN(1_000_000)) * time.Second)
		}
	}
	return rows
}

// groupsByRows are GroupsSQL's groups of q, counted from the rows.
func groupsByRows(t *testing.T, s *Store, q deadletter.Query) []deadletter.Group {
	t.Helper()
	where, args := pgWhere(q)
	rows, err := s.pool.Query(ctx, deadletter.GroupsSQL(where), args...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := scanGroups(rows)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameGroups: the kept counts' groups of q (DeadLetterGroups, q of the
// page's shape) are GroupsSQL's of the rows, count, first and last.
func sameGroups(t *testing.T, s *Store, what string, q deadletter.Query) {
	t.Helper()
	if !pgKeptShape(q) {
		t.Fatalf("%s: %+v is not read from the kept counts", what, q)
	}
	kept, err := s.DeadLetterGroups(ctx, q)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	want := groupsByRows(t, s, q)
	order := func(a, b deadletter.Group) int {
		return cmp.Or(cmp.Compare(a.Word, b.Word), cmp.Compare(a.Status, b.Status))
	}
	slices.SortFunc(kept, order)
	slices.SortFunc(want, order)
	if len(kept) != len(want) {
		t.Fatalf("%s: %d kept groups, %d counted from the rows:\nkept %+v\nrows %+v", what, len(kept), len(want), kept, want)
	}
	for i := range want {
		k, w := kept[i], want[i]
		if k.Word != w.Word || k.Status != w.Status || k.Count != w.Count || !k.First.Equal(w.First) || !k.Last.Equal(w.Last) {
			t.Errorf("%s: kept %+v, from the rows %+v", what, k, w)
		}
	}
}

// pageQueries are the selections the page's first load makes
// (Browser.RowGroups: its states, through the last seq), and all states.
func pageQueries(t *testing.T, s *Store) map[string]deadletter.Query {
	t.Helper()
	last, err := s.LastDeadLetterSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]deadletter.Query{
		"live":          {States: deadletter.Live, Through: last},
		"live, earlier": {States: deadletter.Live, Through: last / 2},
		"archive":       {States: []deadletter.State{deadletter.StatePurged}, Through: last},
		"all":           {},
	}
}

func sameAllGroups(t *testing.T, s *Store, step string) {
	t.Helper()
	for name, q := range pageQueries(t, s) {
		sameGroups(t, s, step+", "+name, q)
		sameCount(t, s, step+", "+name, q)
	}
}

// sameCount: CountDeadLetters of q from the kept counts is the count of
// the rows (CountSQL).
func sameCount(t *testing.T, s *Store, what string, q deadletter.Query) {
	t.Helper()
	kept, err := s.CountDeadLetters(ctx, q)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	where, args := pgWhere(q)
	var want int64
	if err := s.pool.QueryRow(ctx, deadletter.CountSQL(where, 0), args...).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if kept != want {
		t.Errorf("%s: %d counted from the kept counts, %d rows", what, kept, want)
	}
}

func deltaRows(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM dead_letter_counts`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// keyCount is how many keys (state, reason, status, broker_reason) the
// rows have: the delta rows a compaction leaves.
func keyCount(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT DISTINCT state, reason, status, broker_reason FROM dead_letters) AS k`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKeptGroupCountsFollowEachChange: after ingest (a copy twice
// skipped), replay's two states, purge, restore, a purge without archive
// (a delete), the retention's prune and a compaction, the kept counts'
// groups are those counted from the rows; an UPDATE of other columns
// adds no delta, and a compaction leaves one delta a key.
func TestKeptGroupCountsFollowEachChange(t *testing.T) {
	s := openStore(t, pgtest.New(t), Options{})
	r := rand.New(rand.NewPCG(1, 2))
	sameAllGroups(t, s, "empty")
	for b := range 5 {
		rows := countRows(fmt.Sprint("b", b), 300, r)
		rows = append(rows, rows[:20]...) // copies delivered twice: one row each
		added, err := s.PutDeadLetters(ctx, rows)
		if err != nil || added != 300 {
			t.Fatalf("batch %d: %d added, %v", b, added, err)
		}
	}
	if added, err := s.PutDeadLetters(ctx, countRows("b0", 10, r)); err != nil || added != 0 {
		t.Fatalf("a batch ingested again: %d added, %v", added, err)
	}
	sameAllGroups(t, s, "ingested")
	// Seq order is the batches' order and each batch's (the one INSERT
	// keeps its rows' order).
	got, err := s.DeadLetters(ctx, deadletter.Query{IDs: []string{"b1-2", "b0-299", "b1-0", "b1-1"}})
	if err != nil || len(got) != 4 || got[0].MessageID != "b0-299" || got[1].MessageID != "b1-0" || got[2].MessageID != "b1-1" || got[3].MessageID != "b1-2" {
		t.Fatalf("rows not in the order of ingestion: %+v %v", got, err)
	}

	seqs := func(from, to int64) []int64 {
		var out []int64
		for i := from; i <= to; i++ {
			out = append(out, i)
		}
		return out
	}
	at := time.Now()
	change := func(step string, c deadletter.Change) {
		t.Helper()
		c.By, c.Via, c.At = "test", "test", at
		if _, err := s.ChangeDeadLetters(ctx, c); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		sameAllGroups(t, s, step)
	}
	change("replaying", deadletter.Change{Seqs: seqs(1, 400), From: []deadletter.State{deadletter.StateDead}, To: deadletter.StateReplaying})
	change("replayed", deadletter.Change{Seqs: seqs(1, 200), From: []deadletter.State{deadletter.StateReplaying}, To: deadletter.StateReplayed})
	change("purged", deadletter.Change{Seqs: seqs(350, 900), From: deadletter.Live, To: deadletter.StatePurged})
	change("restored", deadletter.Change{Seqs: seqs(800, 850), From: []deadletter.State{deadletter.StatePurged}, To: deadletter.StateDead})
	change("deleted", deadletter.Change{Seqs: seqs(1000, 1100), From: deadletter.Live})

	before := deltaRows(t, s)
	if _, err := s.pool.Exec(ctx, `UPDATE dead_letters SET answer = 'edited', state_by = 'someone' WHERE seq < 1200`); err != nil {
		t.Fatal(err)
	}
	if after := deltaRows(t, s); after != before {
		t.Errorf("an UPDATE of no key column added %d delta rows", after-before)
	}
	if n, err := s.PruneDeadLetters(ctx, []deadletter.State{deadletter.StateReplayed, deadletter.StatePurged}, at.Add(time.Second)); err != nil || n == 0 {
		t.Fatalf("prune: %d %v", n, err)
	}
	sameAllGroups(t, s, "pruned")

	if err := s.compactDeadLetterCounts(ctx); err != nil {
		t.Fatal(err)
	}
	sameAllGroups(t, s, "compacted")
	if n, keys := deltaRows(t, s), keyCount(t, s); n != keys {
		t.Errorf("%d delta rows after a compaction, %d keys", n, keys)
	}

	if _, err := s.pool.Exec(ctx, `TRUNCATE dead_letters`); err != nil {
		t.Fatal(err)
	}
	sameAllGroups(t, s, "truncated")
}

// TestKeptGroupsCountThroughTheSnapshot: rows ingested after the page's
// last seq are not in its counts, as they are not in GroupsSQL's.
func TestKeptGroupsCountThroughTheSnapshot(t *testing.T) {
	s := openStore(t, pgtest.New(t), Options{})
	r := rand.New(rand.NewPCG(3, 4))
	if _, err := s.PutDeadLetters(ctx, countRows("early", 500, r)); err != nil {
		t.Fatal(err)
	}
	last, err := s.LastDeadLetterSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutDeadLetters(ctx, countRows("late", 500, r)); err != nil {
		t.Fatal(err)
	}
	q := deadletter.Query{States: deadletter.Live, Through: last}
	sameGroups(t, s, "through the first batch", q)
	groups, err := s.DeadLetterGroups(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, g := range groups {
		n += g.Count
	}
	if n != 500 {
		t.Errorf("%d rows counted through seq %d, want the first batch's 500", n, last)
	}
}

// TestKeptGroupsUnderConcurrentWriters: an ingest, two changers of
// states (replay, purge, restore, delete, in random orders of seqs, so
// that their statements take rows of several keys in different orders)
// and two compactions, at once: none fails (no deadlock), and the kept
// counts are then the rows' groups.
func TestKeptGroupsUnderConcurrentWriters(t *testing.T) {
	s := openStore(t, pgtest.New(t), Options{})
	if _, err := s.PutDeadLetters(ctx, countRows("seed", 1000, rand.New(rand.NewPCG(5, 6)))); err != nil {
		t.Fatal(err)
	}
	const rounds = 40
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(7, 8))
		for i := range rounds {
			if _, err := s.PutDeadLetters(ctx, countRows(fmt.Sprint("in", i), 100, r)); err != nil {
				errs <- fmt.Errorf("ingest: %w", err)
				return
			}
		}
	}()
	moves := []deadletter.Change{
		{From: []deadletter.State{deadletter.StateDead}, To: deadletter.StateReplaying},
		{From: []deadletter.State{deadletter.StateReplaying}, To: deadletter.StateReplayed},
		{From: deadletter.Live, To: deadletter.StatePurged},
		{From: []deadletter.State{deadletter.StatePurged}, To: deadletter.StateDead},
		{From: []deadletter.State{deadletter.StateReplayed}},
	}
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(9, uint64(w)))
			for range rounds {
				last, err := s.LastDeadLetterSeq(ctx)
				if err != nil {
					errs <- err
					return
				}
				c := moves[r.IntN(len(moves))]
				for range 200 {
					c.Seqs = append(c.Seqs, 1+r.Int64N(last))
				}
				c.By, c.Via, c.At = "test", "test", time.Now()
				if _, err := s.ChangeDeadLetters(ctx, c); err != nil {
					errs <- fmt.Errorf("change %d: %w", w, err)
					return
				}
			}
		}()
	}
	var compactors sync.WaitGroup
	compactions := make([]int, 2)
	for c := range 2 {
		compactors.Add(1)
		go func() {
			defer compactors.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := s.compactDeadLetterCounts(ctx); err != nil {
					errs <- fmt.Errorf("compaction %d: %w", c, err)
					return
				}
				compactions[c]++
			}
		}()
	}
	wg.Wait()
	close(stop)
	compactors.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("compactions: %v; delta rows left: %d", compactions, deltaRows(t, s))
	sameAllGroups(t, s, "after concurrent writers")
}

// TestKeptCountsStayFew: the deltas are folded by the writer (its first
// write, then every pgCompactEvery) and by the page's read past
// pgCompactBound (writes the store did not count: another program's),
// so that the read never sums more than some thousand.
func TestKeptCountsStayFew(t *testing.T) {
	s := openStore(t, pgtest.New(t), Options{})
	r := rand.New(rand.NewPCG(11, 12))
	most := 0
	for i := range 3 * pgCompactEvery {
		if _, err := s.PutDeadLetters(ctx, countRows(fmt.Sprint("one", i), 1, r)); err != nil {
			t.Fatal(err)
		}
		most = max(most, deltaRows(t, s))
	}
	if most > pgCompactEvery+len(countKeys) {
		t.Errorf("%d delta rows after single-row writes, want at most %d", most, pgCompactEvery+len(countKeys))
	}
	var b pgx.Batch
	for i := range pgCompactBound + 100 {
		b.Queue(`INSERT INTO dead_letters (copy_key, message_id, reason, properties, headers, body, ingested_at)
			VALUES ($1, $1, 'rejected', '{}', '{}', '', now())`, fmt.Sprint("raw-", i))
	}
	if err := s.pool.SendBatch(ctx, &b).Close(); err != nil {
		t.Fatal(err)
	}
	if n := deltaRows(t, s); n <= pgCompactBound {
		t.Fatalf("%d delta rows after %d statements", n, pgCompactBound+100)
	}
	sameGroups(t, s, "past the bound", deadletter.Query{States: deadletter.Live})
	if n, keys := deltaRows(t, s), keyCount(t, s); n != keys {
		t.Errorf("%d delta rows after the read past the bound, want one a key", n)
	}
}
