package store

import (
	"eaimq/internal/claim"
	"fmt"
	"testing"
	"time"
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
		if _, err := s.Begin(ctx, "old-00", claim.Copy{Fresh: true}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Finish(ctx, "old-00", claim.Attempt{Status: 503, Outcome: claim.OutRetry, Called: true}); err != nil {
			t.Fatal(err)
		}
		for i := range 25 {
			finish(t, s, fmt.Sprintf("old-%02d", i), claim.OutDelivered)
		}
		// Other states, all older than the cutoff too.
		finish(t, s, "z-dead", claim.OutRejected)
		if _, err := s.Begin(ctx, "z-retry", claim.Copy{Fresh: true}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Finish(ctx, "z-retry", claim.Attempt{Status: 503, Outcome: claim.OutRetry, Called: true}); err != nil {
			t.Fatal(err)
		}
		if b, err := s.Begin(ctx, "m-inflight", claim.Copy{Fresh: true}, time.Hour); err != nil || b.Result != claim.Acquired {
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
		finish(t, s, "new-1", claim.OutDelivered)

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
		if out, err := s.Finish(ctx, "m-inflight", claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil || out != claim.OutDelivered {
			t.Fatalf("finish after prune: %v %v", out, err)
		}
		if n, err := s.Prune(ctx, cutoff, 7); err != nil || n != 0 {
			t.Fatalf("second Prune: %d %v, want nothing more", n, err)
		}
	})
}

// finish records out for id as a decision made on a call.
func finish(t *testing.T, s Store, id string, out claim.Outcome) {
	t.Helper()
	if _, err := s.Finish(ctx, id, claim.Attempt{Status: 201, Outcome: out, Called: true}); err != nil {
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
