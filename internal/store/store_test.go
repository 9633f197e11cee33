package store

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"eaimq/internal/claim"
	"eaimq/internal/pgtest"
	"eaimq/internal/redact"
	"eaimq/internal/store/postgres"

	"github.com/jackc/pgx/v5"
)

// The behaviour of a store is one, whichever backend keeps it: every test
// in this file runs against SQLite and PostgreSQL (a subtest each), and
// the backend-only tests live in sqlite_test.go and postgres_test.go.

var ctx = context.Background()

// backend is what a shared test needs to know of one backend.
type backend struct {
	name string
	// location returns where a new, empty store is.
	location func(t *testing.T) string
	// lose makes holder s lose its claim on id in the way its backend
	// can: SQLite's lease runs out, PostgreSQL's session ends.
	lose func(t *testing.T, s Store, id string)
	// setVersion writes schema version v into the open store s.
	setVersion func(t *testing.T, s Store, v int)
}

// Each backend's lose and setVersion work from outside the store, as
// another process (or an operator) would: through a connection of their
// own to the same file or database.
var backends = []backend{
	{
		name:     "sqlite",
		location: func(t *testing.T) string { return filepath.Join(t.TempDir(), "processed.db") },
		lose: func(t *testing.T, s Store, id string) {
			t.Helper()
			sqliteExec(t, s, `UPDATE claims SET lease_until = 0 WHERE message_id = ?`, id)
		},
		setVersion: func(t *testing.T, s Store, v int) {
			t.Helper()
			sqliteExec(t, s, fmt.Sprintf("PRAGMA user_version = %d", v))
		},
	},
	{
		name:     "postgres",
		location: func(t *testing.T) string { return pgtest.New(t) },
		lose: func(t *testing.T, s Store, id string) {
			t.Helper()
			terminateHolder(t, s.Path(), id)
		},
		setVersion: func(t *testing.T, s Store, v int) {
			t.Helper()
			pgExec(t, s.Path(), `UPDATE eaimq_schema SET version = $1`, v)
		},
	},
}

// sqliteExec runs q on s's file through a connection of its own.
func sqliteExec(t *testing.T, s Store, q string, args ...any) {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+s.Path()+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatal(err)
	}
}

// pgExec runs q on the database at loc through a connection of its own.
func pgExec(t *testing.T, loc, q string, args ...any) {
	t.Helper()
	c, err := pgx.Connect(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, q, args...); err != nil {
		t.Fatal(err)
	}
}

// terminateHolder ends the session that holds the claim on id (the one
// holding its advisory lock), from another connection, as an operator (or
// a dead network) would, and returns when that backend has exited.
func terminateHolder(t *testing.T, loc, id string) {
	t.Helper()
	c, err := pgx.Connect(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := pgtest.TerminateLockHolder(ctx, c, postgres.LockKey(id)); err != nil {
		t.Fatalf("terminate the holder of %s: %v", id, err)
	}
}

// forEachBackend runs f as a subtest for each backend.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// openStore opens the store at loc and closes it when the test ends.
func openStore(t *testing.T, loc string, o Options) Store {
	t.Helper()
	s, err := Open(loc, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Two holders in two processes: owners on another host, so that SQLite
// never takes either for a dead process of this one.
var (
	holderA = Options{Owner: "elsewhere:1:1"}
	holderB = Options{Owner: "elsewhere:2:2"}
)

func TestDedupLifecycle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		loc := be.location(t)
		s := openStore(t, loc, Options{})
		b, err := s.Begin(ctx, "g1", claim.Copy{ClaimID: "C-1", Fresh: true}, time.Minute)
		if err != nil || b.Result != claim.Acquired || b.Failures != 0 {
			t.Fatalf("first Begin: %+v %v", b, err)
		}
		// A transient failure, then the redelivered copy sees it.
		if out, err := s.Finish(ctx, "g1", claim.Attempt{Status: 503, Outcome: claim.OutRetry, Called: true}); err != nil || out != claim.OutRetry {
			t.Fatal(out, err)
		}
		if b, err := s.Begin(ctx, "g1", claim.Copy{}, time.Minute); err != nil || b.Result != claim.Acquired || b.Failures != 1 {
			t.Fatalf("redelivered Begin: %+v %v, want acquired with 1 failure", b, err)
		}
		// A fresh copy of the same id starts over; the holder may take
		// its own claim again.
		if b, err := s.Begin(ctx, "g1", claim.Copy{Fresh: true}, time.Minute); err != nil || b.Result != claim.Acquired || b.Failures != 0 {
			t.Fatalf("fresh Begin: %+v %v, want acquired with 0 failures", b, err)
		}
		if out, err := s.Finish(ctx, "g1", claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil || out != claim.OutDelivered {
			t.Fatal(out, err)
		}
		if b, _ := s.Begin(ctx, "g1", claim.Copy{Fresh: true}, time.Minute); b.Result != claim.Done {
			t.Fatalf("after ack: %v, want done", b.Result)
		}
		s.Close()
		// The record survives a restart.
		s2 := openStore(t, loc, Options{})
		if b, _ := s2.Begin(ctx, "g1", claim.Copy{Fresh: true}, time.Minute); b.Result != claim.Done {
			t.Fatalf("after reopen: %v, want done", b.Result)
		}
		rec, found, err := s2.Get(ctx, "g1")
		if err != nil || !found || !rec.Delivered() || rec.Attempts != 2 || rec.ClaimID != "C-1" || rec.LastStatus != 201 ||
			rec.Outcome != claim.OutDelivered || rec.DoneAt.IsZero() || rec.MessageID != "g1" {
			t.Fatalf("record: %+v %v %v", rec, found, err)
		}
		as, err := s2.Attempts(ctx, "g1")
		// The log keeps the failure; the success is told by the record.
		if err != nil || len(as) != 1 || as[0].Status != 503 || as[0].Outcome != claim.OutRetry || !as[0].Called {
			t.Fatalf("attempts: %+v %v", as, err)
		}
	})
}

// TestBusyBetweenHolders: while one holder has a claim in progress another
// is told claim.Busy; when the first finishes or loses it (SQLite: its lease ran
// out; PostgreSQL: its session ended), the other takes it.
func TestBusyBetweenHolders(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		loc := be.location(t)
		a, b := openStore(t, loc, holderA), openStore(t, loc, holderB)
		if got, err := a.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); err != nil || got.Result != claim.Acquired {
			t.Fatalf("a: %+v %v", got, err)
		}
		for range 2 {
			if got, err := b.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); err != nil || got.Result != claim.Busy {
				t.Fatalf("b: %+v %v, want busy while a holds it", got, err)
			}
		}
		if _, err := a.Finish(ctx, "g", claim.Attempt{Status: 503, Outcome: claim.OutRetry, Called: true}); err != nil {
			t.Fatal(err)
		}
		if got, err := b.Begin(ctx, "g", claim.Copy{}, time.Hour); err != nil || got.Result != claim.Acquired || got.Failures != 1 {
			t.Fatalf("b after a finished: %+v %v, want acquired with a's failure", got, err)
		}
		if got, _ := a.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); got.Result != claim.Busy {
			t.Fatalf("a: %v, want busy while b holds it", got.Result)
		}
		be.lose(t, b, "g")
		if got, err := a.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); err != nil || got.Result != claim.Acquired {
			t.Fatalf("a after b lost it: %+v %v, want acquired", got, err)
		}
	})
}

// TestOneWinnerUnderConcurrency: many goroutines on two stores (two
// processes sharing one store) race for one id; one store gets it. (A
// store may take its own claim twice; the consumer never asks it to.)
func TestOneWinnerUnderConcurrency(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		loc := be.location(t)
		stores := []Store{openStore(t, loc, holderA), openStore(t, loc, holderB)}
		for round := range 20 {
			id := fmt.Sprintf("g%d", round)
			var won [2]atomic.Int32
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got, err := stores[i%2].Begin(ctx, id, claim.Copy{Fresh: true}, time.Minute)
					if err != nil {
						t.Error(err)
					}
					if got.Result == claim.Acquired {
						won[i%2].Add(1)
					}
				}()
			}
			wg.Wait()
			winners, winner := 0, 0
			for i := range won {
				if won[i].Load() > 0 {
					winners, winner = winners+1, i
				}
			}
			if winners != 1 {
				t.Fatalf("round %d: %d stores acquired it (%d, %d)", round, winners, won[0].Load(), won[1].Load())
			}
			if _, err := stores[winner].Finish(ctx, id, claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestNewerSchemaRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		loc := be.location(t)
		s := openStore(t, loc, Options{})
		be.setVersion(t, s, 99)
		s.Close()
		for _, ro := range []bool{false, true} {
			if s, err := Open(loc, Options{ReadOnly: ro}); err == nil {
				s.Close()
				t.Fatalf("read-only %v: a newer schema was accepted", ro)
			}
		}
	})
}

// TestLateHolderCannotOverwrite: a holder that lost its claim (its lease
// ran out, its session ended), and whose claim another holder took and
// delivered, must not turn the done record back into a failure: its
// delivery is acked as a duplicate instead.
func TestLateHolderCannotOverwrite(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		loc := be.location(t)
		late, other := openStore(t, loc, holderA), openStore(t, loc, holderB)
		if b, _ := late.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); b.Result != claim.Acquired {
			t.Fatal("late did not acquire")
		}
		be.lose(t, late, "g")
		if b, _ := other.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); b.Result != claim.Acquired {
			t.Fatalf("other: %v", b.Result)
		}
		// The late holder fails while the other holds it: it records its
		// call, not a state.
		if out, err := late.Finish(ctx, "g", claim.Attempt{Status: 503, Outcome: claim.OutRetry, Called: true}); err != nil || out != claim.OutRetry {
			t.Fatal(out, err)
		}
		rec, _, _ := other.Get(ctx, "g")
		if rec.State != "inflight" || rec.Attempts != 1 {
			t.Fatalf("a late failure released another holder's claim: %+v", rec)
		}
		if out, _ := other.Finish(ctx, "g", claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); out != claim.OutDelivered {
			t.Fatalf("other: %v", out)
		}
		out, err := late.Finish(ctx, "g", claim.Attempt{Status: 0, Error: "timeout", Outcome: claim.OutFailed, Detail: "x", Called: true})
		if err != nil || out != claim.OutDuplicate {
			t.Fatalf("late finish after done: %v %v, want the duplicate outcome", out, err)
		}
		rec, _, _ = other.Get(ctx, "g")
		if !rec.Delivered() || rec.Outcome != claim.OutDelivered || rec.Attempts != 3 {
			t.Fatalf("the done record was overwritten: %+v", rec)
		}
		as, _ := other.Attempts(ctx, "g")
		if len(as) != 2 || as[0].Outcome != claim.OutRetry || as[1].Outcome != claim.OutDuplicate {
			t.Fatalf("attempts: %+v, want the late failure and the duplicate", as)
		}
	})
}

// TestLateAcceptanceIsRecorded: a late holder whose answer was the
// acceptance records it even though another holds the claim now:
// acceptance is the truth whoever heard it. The other then learns that the
// claim was delivered meanwhile.
func TestLateAcceptanceIsRecorded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		loc := be.location(t)
		late, other := openStore(t, loc, holderA), openStore(t, loc, holderB)
		late.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour)
		be.lose(t, late, "g")
		if b, _ := other.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); b.Result != claim.Acquired {
			t.Fatalf("other: %v", b.Result)
		}
		if out, err := late.Finish(ctx, "g", claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil || out != claim.OutDelivered {
			t.Fatalf("late acceptance: %v %v", out, err)
		}
		if out, err := other.Finish(ctx, "g", claim.Attempt{Status: 503, Outcome: claim.OutRetry, Called: true}); err != nil || out != claim.OutDuplicate {
			t.Fatalf("other after the late acceptance: %v %v, want duplicate", out, err)
		}
		if b, _ := other.Begin(ctx, "g", claim.Copy{}, time.Hour); b.Result != claim.Done {
			t.Fatalf("next copy: %v, want done", b.Result)
		}
	})
}

// TestRedeliveredDeadIsNotTriedAgain: the dead-letter decision is on record
// but the reject never reached the broker; the redelivered copy meets it.
// A fresh copy (a replay, a republish) is tried again.
func TestRedeliveredDeadIsNotTriedAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		loc := be.location(t)
		s, other := openStore(t, loc, holderA), openStore(t, loc, holderB)
		s.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Minute)
		if _, err := s.Finish(ctx, "g", claim.Attempt{Status: 422, Outcome: claim.OutRejected, Detail: "rejected by the claim system", Called: true}); err != nil {
			t.Fatal(err)
		}
		if b, _ := s.Begin(ctx, "g", claim.Copy{}, time.Minute); b.Result != claim.DeadBefore || b.Prior != claim.OutRejected {
			t.Fatalf("redelivered: %+v, want dead before with the recorded reason", b)
		}
		// claim.DeadBefore holds nothing: another holder's fresh copy is tried.
		if b, _ := other.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Minute); b.Result != claim.Acquired {
			t.Fatalf("fresh: %+v, want acquired", b)
		}
	})
}

// TestDoneHoldsNothing: a Begin that finds the claim done (or dead before)
// leaves no claim held behind it.
func TestDoneHoldsNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		loc := be.location(t)
		a, b := openStore(t, loc, holderA), openStore(t, loc, holderB)
		a.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Minute)
		a.Finish(ctx, "g", claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true})
		for range 3 {
			for _, s := range []Store{a, b} {
				if got, err := s.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Minute); err != nil || got.Result != claim.Done {
					t.Fatalf("%+v %v, want done", got, err)
				}
			}
		}
	})
}

// TestReadAPI: what dlq reads back. A decision made without a Begin (no
// id, unsendable) is kept too, under any bytes an id may hold, with error
// text that is not valid UTF-8.
func TestReadAPI(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		loc := be.location(t)
		s := openStore(t, loc, Options{})
		if _, found, err := s.Get(ctx, "nothing"); found || err != nil {
			t.Fatalf("Get of an unknown id: %v %v", found, err)
		}
		if as, err := s.Attempts(ctx, "nothing"); len(as) != 0 || err != nil {
			t.Fatalf("Attempts of an unknown id: %v %v", as, err)
		}
		for _, id := range []string{"plain", "a\x00b", "\xff\xfe", `\x41`, "sha256:0011"} {
			detail := claim.OutUnsendable.Describe(0, 0)
			at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
			out, err := s.Finish(ctx, id, claim.Attempt{At: at, Redelivered: true, Outcome: claim.OutUnsendable, Detail: detail, Error: "bad \xe3\x81 byte\x00"})
			if err != nil || out != claim.OutUnsendable {
				t.Fatalf("%q: %v %v", id, out, err)
			}
			rec, found, err := s.Get(ctx, id)
			if err != nil || !found || rec.MessageID != id || rec.State != "dead" || rec.Outcome != claim.OutUnsendable ||
				rec.DeadReason != detail || rec.Attempts != 0 || rec.LastError == "" || rec.UpdatedAt.IsZero() {
				t.Fatalf("%q: %+v %v %v", id, rec, found, err)
			}
			as, err := s.Attempts(ctx, id)
			if err != nil || len(as) != 1 || as[0].Outcome != claim.OutUnsendable || !as[0].Redelivered || !as[0].At.Equal(at) {
				t.Fatalf("%q attempts: %+v %v", id, as, err)
			}
		}
		// Each odd id is its own record: `\xfffe` is not "\xff\xfe".
		if _, found, _ := s.Get(ctx, `\xfffe`); found {
			t.Fatal("`\\xfffe` found: another id's record was taken for it")
		}
		s.Begin(ctx, "r", claim.Copy{ClaimID: "C-9", Fresh: true}, time.Minute)
		s.Finish(ctx, "r", claim.Attempt{Status: 422, Error: "docs missing", Outcome: claim.OutRejected, Detail: "rejected by the claim system", Latency: 25 * time.Millisecond, Called: true})
		rec, _, _ := s.Get(ctx, "r")
		if rec.ClaimID != "C-9" || rec.LastStatus != 422 || rec.LastError != "docs missing" || rec.Outcome != claim.OutRejected || rec.Attempts != 1 || !rec.DoneAt.IsZero() {
			t.Fatalf("rejected record: %+v", rec)
		}
		as, _ := s.Attempts(ctx, "r")
		if len(as) != 1 || as[0].Latency != 25*time.Millisecond || as[0].Error != "docs missing" || as[0].Status != 422 {
			t.Fatalf("rejected attempts: %+v", as)
		}
	})
}

// TestRecords: Records is Get for many ids at once, odd ids included, and
// leaves out the ids without a record.
func TestRecords(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := openStore(t, be.location(t), Options{})
		ids := []string{"plain", "a\x00b", "\xff\xfe", `\x41`}
		for i := range 1200 {
			ids = append(ids, fmt.Sprintf("many-%04d", i))
		}
		for _, id := range ids {
			if _, err := s.Finish(ctx, id, claim.Attempt{Status: 422, Outcome: claim.OutRejected, Detail: "rejected", Called: true}); err != nil {
				t.Fatal(err)
			}
		}
		if b, err := s.Begin(ctx, "held", claim.Copy{ClaimID: "C-held", Fresh: true}, time.Minute); err != nil || b.Result != claim.Acquired {
			t.Fatal(b, err)
		}
		got, err := s.Records(ctx, append(ids, "held", "none-such"))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(ids)+1 {
			t.Fatalf("%d records, want %d", len(got), len(ids)+1)
		}
		for _, id := range append(ids, "held") {
			want, _, _ := s.Get(ctx, id)
			if g := got[id]; g.MessageID != id || g.State != want.State || g.Outcome != want.Outcome || g.ClaimID != want.ClaimID {
				t.Errorf("%q: %+v, want %+v", id, g, want)
			}
		}
		if _, found := got["none-such"]; found {
			t.Error("an id without a record is in the map")
		}
	})
}

// TestLineage: a copy whose step was carried out already (its delayed copy
// confirmed, or the claim dead-lettered after it) is StepDone, on both
// backends and in both of SQLite's modes; the live step is taken; a first
// try of a fresh copy starts the lineage over.
func TestLineage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		for _, shared := range []bool{false, true} {
			loc := be.location(t)
			s := openStore(t, loc, holderA)
			if shared {
				openStore(t, loc, holderB)
			}
			begin := func(id string, c claim.Copy) claim.BeginResult {
				t.Helper()
				b, err := s.Begin(ctx, id, c, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				return b.Result
			}
			// Step 0 fails; its delayed copy for step 1 is confirmed.
			begin("g", claim.Copy{Fresh: true})
			if _, err := s.Finish(ctx, "g", claim.Attempt{Status: 503, Outcome: claim.OutDelayed, Called: true, Lineage: 1}); err != nil {
				t.Fatal(err)
			}
			if got := begin("g", claim.Copy{Step: 0}); got != claim.StepDone {
				t.Fatalf("shared=%v: the original redelivered after its copy was confirmed: %v, want step done", shared, got)
			}
			if got := begin("g", claim.Copy{Fresh: true, Step: 1}); got != claim.Acquired {
				t.Fatalf("shared=%v: the delayed copy: %v, want acquired", shared, got)
			}
			// Step 1 fails for the last time: copy t1 is dead-lettered
			// after it.
			if _, err := s.Finish(ctx, "g", claim.Attempt{Status: 503, Outcome: claim.OutFailed, Detail: "x", Called: true, Lineage: 2, Token: "t1"}); err != nil {
				t.Fatal(err)
			}
			if got := begin("g", claim.Copy{Fresh: true, Step: 1, Token: "t2"}); got != claim.StepDone {
				t.Fatalf("shared=%v: a second copy of the dead-lettered step: %v, want step done", shared, got)
			}
			// Redelivered, only the dead-lettered copy itself is rejected
			// again; its sibling (a crash between a confirm and its record
			// sent two) is acked, or the claim would be in claim.dead twice.
			if b, _ := s.Begin(ctx, "g", claim.Copy{Step: 1, Token: "t1"}, time.Minute); b.Result != claim.DeadBefore || b.Prior != claim.OutFailed {
				t.Fatalf("shared=%v: the dead-lettered delivery redelivered: %+v, want dead before", shared, b)
			}
			if got := begin("g", claim.Copy{Step: 1, Token: "t2"}); got != claim.StepDone {
				t.Fatalf("shared=%v: its sibling redelivered: %v, want step done", shared, got)
			}
			// A replay (fresh, step 0) starts over: afterwards a redelivered
			// first try is live again.
			if b, _ := s.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Minute); b.Result != claim.Acquired || !b.Restart {
				t.Fatalf("shared=%v: a replay: %+v, want acquired, restarting", shared, b)
			}
			if _, err := s.Finish(ctx, "g", claim.Attempt{Status: 503, Outcome: claim.OutRetry, Called: true}); err != nil {
				t.Fatal(err)
			}
			if got := begin("g", claim.Copy{Step: 0}); got != claim.Acquired {
				t.Fatalf("shared=%v: after the replay's first failure, its redelivery: %v, want acquired", shared, got)
			}
		}
	})
}

// TestReadOnly: dlq opens the store read-only: it reads, it never writes,
// and it does not create or migrate a store.
func TestReadOnly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		loc := be.location(t)
		if s, err := Open(loc, Options{ReadOnly: true}); err == nil {
			s.Close()
			t.Fatal("read-only open of a store never written succeeded")
		}
		w := openStore(t, loc, Options{})
		w.Finish(ctx, "g", claim.Attempt{Outcome: claim.OutNoID, Detail: claim.ReasonNoID})
		r := openStore(t, loc, Options{ReadOnly: true})
		if rec, found, err := r.Get(ctx, "g"); err != nil || !found || rec.Outcome != claim.OutNoID {
			t.Fatalf("read-only Get: %+v %v %v", rec, found, err)
		}
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := r.Begin(c, "h", claim.Copy{Fresh: true}, time.Minute); err == nil {
			t.Fatal("a read-only store took a claim")
		}
	})
}

// TestPathNamesTheStore: Path is the location as the user gave it, without
// a password.
func TestPathNamesTheStore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		loc := be.location(t)
		if be.name == "postgres" {
			// Trust authentication ignores the password.
			loc = withPassword(t, loc, "s3cret-pw")
		}
		s := openStore(t, loc, Options{})
		if got := s.Path(); got != redact.URL(loc) && got != loc {
			t.Fatalf("Path() = %q", got)
		}
		if be.name == "postgres" && (s.Path() == loc || containsAny(s.Path(), "s3cret-pw")) {
			t.Fatalf("Path() = %q shows the password", s.Path())
		}
	})
}

func withPassword(t *testing.T, loc, pw string) string {
	t.Helper()
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), pw)
	return u.String()
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// The model checker's findings in claim.Begin and claim.Finish
// (docs/model.md, "What it found"), each as a case on every backend and,
// for SQLite, in both modes: solo (one store on the file) and shared.

// TestLateHolderKeepsDeadRecord: a holder whose lease ran out between its
// delayed copy's confirm and its record does not overwrite the next
// step's dead-letter decision (finding 2). Overwritten, the dead-lettered
// copy's lost reject would come back as "a step carried out", be acked,
// and the claim would be nowhere.
func TestLateHolderKeepsDeadRecord(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		for _, shared := range []bool{false, true} {
			loc := be.location(t)
			s := openStore(t, loc, holderA)
			late := s // solo: an outcome recorded without a Begin
			if shared {
				late = openStore(t, loc, holderB)
				if b, err := late.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); err != nil || b.Result != claim.Acquired {
					t.Fatalf("shared=%v: late: %+v %v", shared, b, err)
				}
				be.lose(t, late, "g")
			}
			if b, err := s.Begin(ctx, "g", claim.Copy{Fresh: true, Step: 1, Token: "t1"}, time.Hour); err != nil || b.Result != claim.Acquired {
				t.Fatalf("shared=%v: step 1: %+v %v", shared, b, err)
			}
			if _, err := s.Finish(ctx, "g", claim.Attempt{Status: 503, Outcome: claim.OutFailed, Called: true, Lineage: 2, Token: "t1"}); err != nil {
				t.Fatal(err)
			}
			delayed := claim.Attempt{Status: 503, Outcome: claim.OutDelayed, Called: true, Lineage: 1}
			out, err := late.Finish(ctx, "g", delayed)
			if err != nil && Transient(err) {
				out, err = late.Finish(ctx, "g", delayed) // PostgreSQL: the late holder's session was ended
			}
			if err != nil || out != claim.OutDelayed {
				t.Fatalf("shared=%v: the late delayed retry: %v %v", shared, out, err)
			}
			rec, _, err := s.Get(ctx, "g")
			if err != nil || rec.State != claim.StateDead || rec.Outcome != claim.OutFailed || rec.Attempts != 2 {
				t.Fatalf("shared=%v: record %+v %v; want dead (failed twice), both calls counted", shared, rec, err)
			}
			if b, err := s.Begin(ctx, "g", claim.Copy{Step: 1, Token: "t1"}, time.Hour); err != nil || b.Result != claim.DeadBefore {
				t.Fatalf("shared=%v: the dead-lettered copy redelivered: %+v %v, want dead before (rejected again)", shared, b, err)
			}
		}
	})
}

// TestLateDeadLetterKeepsLineage: a late holder's dead-letter decision,
// kept out of a record another holder has in flight, does not raise the
// lineage (finding 4): its reject lost, its redelivered copy is not "a
// step carried out" but a claim still to be decided.
func TestLateDeadLetterKeepsLineage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		loc := be.location(t)
		late, other := openStore(t, loc, holderA), openStore(t, loc, holderB)
		if b, err := late.Begin(ctx, "g", claim.Copy{Fresh: true, Step: 1, Token: "t1"}, time.Hour); err != nil || b.Result != claim.Acquired {
			t.Fatalf("late: %+v %v", b, err)
		}
		be.lose(t, late, "g")
		if b, err := other.Begin(ctx, "g", claim.Copy{Step: 1, Token: "t1"}, time.Hour); err != nil || b.Result != claim.Acquired {
			t.Fatalf("other: %+v %v", b, err)
		}
		dead := claim.Attempt{Status: 503, Outcome: claim.OutFailed, Called: true, Lineage: 2, Token: "t1"}
		out, err := late.Finish(ctx, "g", dead)
		if err != nil && Transient(err) {
			out, err = late.Finish(ctx, "g", dead)
		}
		if err != nil || out != claim.OutFailed {
			t.Fatalf("the late dead-letter decision: %v %v", out, err)
		}
		if _, err := other.Finish(ctx, "g", claim.Attempt{Status: 503, Outcome: claim.OutRetry, Called: true}); err != nil {
			t.Fatal(err)
		}
		if b, err := other.Begin(ctx, "g", claim.Copy{Step: 1, Token: "t1"}, time.Hour); err != nil || b.Result != claim.Acquired {
			t.Fatalf("step 1 redelivered: %+v %v, want acquired (the late decision is not on record)", b, err)
		}
	})
	// Solo SQLite: the claim in flight for a store that shared the file
	// (see TestSoloLeavesAnothersClaim).
	s := openStore(t, filepath.Join(t.TempDir(), "processed.db"), holderA)
	sqliteExec(t, s, claim.SQL(`INSERT INTO claims (message_id, state, owner, lease_until, updated_at) VALUES ('g', {inflight}, 'elsewhere:9:9', ?, 0)`),
		time.Now().Add(time.Hour).UnixMilli())
	if out, err := s.Finish(ctx, "g", claim.Attempt{Status: 503, Outcome: claim.OutFailed, Called: true, Lineage: 2, Token: "t1"}); err != nil || out != claim.OutFailed {
		t.Fatalf("solo: %v %v", out, err)
	}
	sqliteExec(t, s, `UPDATE claims SET lease_until = 0 WHERE message_id = 'g'`)
	if b, err := s.Begin(ctx, "g", claim.Copy{Step: 1, Token: "t1"}, time.Hour); err != nil || b.Result != claim.Acquired {
		t.Fatalf("solo: step 1 redelivered: %+v %v, want acquired (the decision kept out is not on record)", b, err)
	}
}

// TestDeadSiblingIsNotReplay: with two copies of a step (a lost confirm),
// the first dead-lettered (422), the second, fresh at step 1, is a
// delayed sibling, acked without a call; a replay comes back at step 0
// (dlq strips x-death) and is called (finding 3).
func TestDeadSiblingIsNotReplay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		for _, shared := range []bool{false, true} {
			loc := be.location(t)
			s := openStore(t, loc, holderA)
			if shared {
				openStore(t, loc, holderB)
			}
			if b, err := s.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); err != nil || b.Result != claim.Acquired {
				t.Fatalf("shared=%v: %+v %v", shared, b, err)
			}
			if _, err := s.Finish(ctx, "g", claim.Attempt{Status: 422, Outcome: claim.OutRejected, Called: true}); err != nil {
				t.Fatal(err)
			}
			if b, err := s.Begin(ctx, "g", claim.Copy{Fresh: true, Step: 1, Token: "t2"}, time.Hour); err != nil || b.Result != claim.StepDone {
				t.Fatalf("shared=%v: the delayed sibling: %+v %v, want step done", shared, b, err)
			}
			if b, err := s.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); err != nil || b.Result != claim.Acquired || !b.Restart {
				t.Fatalf("shared=%v: a replay: %+v %v, want acquired, restarting", shared, b, err)
			}
		}
	})
}
