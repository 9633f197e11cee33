package sqlite

import (
	"eaimq/internal/claim"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// waitKnown waits for s's filter to be ready (its scan done), failing the
// test when it is not within 30 s or s is not solo.
func waitKnown(t *testing.T, s *Store) {
	t.Helper()
	if s.known == nil {
		t.Fatal("the store is not solo: no filter")
	}
	s.known.proceed() // as a store that has finished enough claims (see scan)
	select {
	case <-s.scanned:
	case <-time.After(30 * time.Second):
		t.Fatal("the filter's scan did not end within 30s")
	}
	if !s.known.ready.Load() {
		t.Fatal("the scan ended without the filter ready")
	}
}

// TestKnownNeverForgets: a solo store's filter never lets Begin take an id
// that has a record for one never seen. The records of an earlier store
// (found by the scan, odd ids included), and those this store writes
// itself after the scan, are each found; fresh ids are taken, and most of
// them without a read. The earlier records span three of the scan's chunks.
func TestKnownNeverForgets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "processed.db")
	before := []string{"a\x00b", "\xff\xfe", `\x41`, ""}
	for i := range 2*scanChunk + 100 { // three chunks of the scan
		before = append(before, fmt.Sprintf("before-%05d", i))
	}
	first := open(t, path, Options{Synchronous: "normal"})
	for _, id := range before {
		if _, err := first.Finish(ctx, id, claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil {
			t.Fatal(err)
		}
	}
	first.Close()

	s := open(t, path, Options{})
	waitKnown(t, s)
	for _, id := range before {
		if s.known.absent(id) {
			t.Fatalf("%q has a record and the filter says it has none", id)
		}
		if b, err := s.Begin(ctx, id, claim.Copy{Fresh: true}, time.Minute); err != nil || b.Result != claim.Done {
			t.Fatalf("%q, delivered by the earlier store: %+v %v, want done", id, b, err)
		}
	}
	var skipped int
	for i := range 2000 {
		id := fmt.Sprintf("after-%04d", i)
		if s.known.absent(id) {
			skipped++
		}
		if b, err := s.Begin(ctx, id, claim.Copy{Fresh: true}, time.Minute); err != nil || b.Result != claim.Acquired {
			t.Fatalf("%s, never seen: %+v %v", id, b, err)
		}
		if _, err := s.Finish(ctx, id, claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil {
			t.Fatal(err)
		}
		if b, err := s.Begin(ctx, id, claim.Copy{Fresh: true}, time.Minute); err != nil || b.Result != claim.Done {
			t.Fatalf("%s, just delivered by this store: %+v %v, want done", id, b, err)
		}
	}
	if skipped < 1990 {
		t.Errorf("the filter spared %d of 2,000 reads of fresh ids, want nearly all", skipped)
	}
}

// TestKnownScanWaitsForCredit: on a file of more than one chunk of
// records, the filter becomes ready once the store has finished a claim
// for every scanCredit bytes of the file (its first chunk read at once),
// and never says "no" of a record the scan found.
func TestKnownScanWaitsForCredit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "processed.db")
	first := open(t, path, Options{Synchronous: "normal"})
	var before []string
	for i := range scanChunk + 100 {
		before = append(before, fmt.Sprintf("before-%05d", i))
	}
	for _, id := range before {
		if _, err := first.Finish(ctx, id, claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil {
			t.Fatal(err)
		}
	}
	first.Close()

	s := open(t, path, Options{Synchronous: "normal"})
	due := s.known.due.Load()
	if due <= 0 {
		t.Fatalf("the scan owes no claims on a file of %d records", len(before))
	}
	for i := range due {
		id := fmt.Sprintf("after-%05d", i)
		if _, err := s.Begin(ctx, id, claim.Copy{Fresh: true}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Finish(ctx, id, claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-s.scanned:
	case <-time.After(30 * time.Second):
		t.Fatalf("the scan did not end within 30s of the %d claims it waited for", due)
	}
	if !s.known.ready.Load() {
		t.Fatal("the scan ended without the filter ready")
	}
	for _, id := range before {
		if s.known.absent(id) {
			t.Fatalf("%q has a record and the filter says it has none", id)
		}
	}
}
