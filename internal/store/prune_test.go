package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPrune: Prune deletes done records delivered before the cutoff, with
// their attempt logs, in batches smaller than the table, and leaves every
// other record: newer deliveries, a claim in flight, one waiting for its
// retry, a dead letter, however old they are.
func TestPrune(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := openStore(t, be.location(t), Options{})
		// 25 old deliveries, one of them after a failed call (an attempt
		// log to delete with it).
		if _, err := s.Begin(ctx, "old-00", "", true, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Finish(ctx, "old-00", Attempt{Status: 503, Outcome: OutRetry, Called: true}); err != nil {
			t.Fatal(err)
		}
		for i := range 25 {
			finish(t, s, fmt.Sprintf("old-%02d", i), OutDelivered)
		}
		// Other states, all older than the cutoff too.
		finish(t, s, "z-dead", OutRejected)
		if _, err := s.Begin(ctx, "z-retry", "", true, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Finish(ctx, "z-retry", Attempt{Status: 503, Outcome: OutRetry, Called: true}); err != nil {
			t.Fatal(err)
		}
		if b, err := s.Begin(ctx, "m-inflight", "", true, time.Hour); err != nil || b.Result != Acquired {
			t.Fatalf("begin: %+v %v", b, err)
		}
		last, _, err := s.Get(ctx, "old-24")
		if err != nil {
			t.Fatal(err)
		}
		// The cutoff lies after every record above and before the next
		// one: done_at is kept in milliseconds.
		cutoff := last.DoneAt.Add(time.Millisecond)
		for time.Now().Before(cutoff.Add(time.Millisecond)) {
			time.Sleep(time.Millisecond)
		}
		finish(t, s, "new-1", OutDelivered)

		n, err := s.Prune(ctx, cutoff, 7) // several batches, the last one short
		if err != nil || n != 25 {
			t.Fatalf("Prune: %d %v, want 25 deleted", n, err)
		}
		for i := range 25 {
			if _, found, err := s.Get(ctx, fmt.Sprintf("old-%02d", i)); err != nil || found {
				t.Fatalf("old-%02d: found %v %v, want pruned", i, found, err)
			}
		}
		if as, err := s.Attempts(ctx, "old-00"); err != nil || len(as) != 0 {
			t.Fatalf("attempts of a pruned record: %+v %v", as, err)
		}
		for id, state := range map[string]string{"new-1": "done", "z-dead": "dead", "z-retry": "failed", "m-inflight": "inflight"} {
			rec, found, err := s.Get(ctx, id)
			if err != nil || !found || string(rec.State) != state {
				t.Errorf("%s: %+v found %v %v, want kept as %s", id, rec, found, err, state)
			}
		}
		if as, err := s.Attempts(ctx, "z-dead"); err != nil || len(as) != 1 {
			t.Errorf("the dead letter's log: %+v %v, want kept", as, err)
		}
		// The in-flight claim is still this holder's to finish.
		if out, err := s.Finish(ctx, "m-inflight", Attempt{Status: 201, Outcome: OutDelivered, Called: true}); err != nil || out != OutDelivered {
			t.Fatalf("finish after prune: %v %v", out, err)
		}
		if n, err := s.Prune(ctx, cutoff, 7); err != nil || n != 0 {
			t.Fatalf("second Prune: %d %v, want nothing more", n, err)
		}
	})
}

// finish records out for id as a decision made on a call.
func finish(t *testing.T, s Store, id string, out Outcome) {
	t.Helper()
	if _, err := s.Finish(ctx, id, Attempt{Status: 201, Outcome: out, Called: true}); err != nil {
		t.Fatal(err)
	}
}

func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "0": 0, "90d": 90 * 24 * time.Hour, "1.5d": 36 * time.Hour, "36h": 36 * time.Hour, "1s": time.Second} {
		if got, err := ParseAge(in); err != nil || got != want {
			t.Errorf("ParseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"90", "d", "-1d", "0d", "90days", "500ms", "1e9d", "NaNd"} {
		if got, err := ParseAge(in); err == nil {
			t.Errorf("ParseAge(%q) = %v, want an error", in, got)
		}
	}
}

// TestPostgresPruneSkipsHeldClaim: on PostgreSQL a record whose claim lock
// another session holds (a consumer's Begin reading it at that moment) is
// left for the next run, then pruned once the lock is free.
func TestPostgresPruneSkipsHeldClaim(t *testing.T) {
	loc := pgtestNew(t)
	s := openStore(t, loc, Options{})
	finish(t, s, "held", OutDelivered)
	finish(t, s, "free", OutDelivered)
	c, err := pgx.Connect(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `SELECT pg_advisory_lock($1)`, claimLockKey("held")); err != nil {
		t.Fatal(err)
	}
	cutoff := time.Now().Add(time.Hour)
	if n, err := s.Prune(ctx, cutoff, 10); err != nil || n != 1 {
		t.Fatalf("Prune with one claim locked: %d %v, want 1", n, err)
	}
	if _, found, _ := s.Get(ctx, "held"); !found {
		t.Fatal("the locked claim's record was pruned")
	}
	if _, err := c.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(ctx, cutoff, 10); err != nil || n != 1 {
		t.Fatalf("Prune after the unlock: %d %v, want 1", n, err)
	}
}
