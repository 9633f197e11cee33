package sqlite

import (
	"eaimq/internal/claim"
	"path/filepath"
	"testing"
	"time"
)

// rows counts the claims rows in the file, read apart from the store.
func rows(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.reads.db.QueryRow(`SELECT count(*) FROM claims`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSoloThenShared: a store alone on its file is solo: a claim in
// progress is no row, and its record is one. When a second store opens the
// file, the first writes down the claims it holds before the second's Open
// returns, so the second is told claim.Busy for them at once, and both then work
// as sharers: a third store never turns solo beside them.
func TestSoloThenShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	a := open(t, path, holderA)
	if !a.isSolo() {
		t.Fatal("a store alone on its file is not solo")
	}
	if b, err := a.Begin(ctx, "held", claim.Copy{ClaimID: "C-1", Fresh: true}, time.Hour); err != nil || b.Result != claim.Acquired {
		t.Fatalf("begin: %+v %v", b, err)
	}
	if n := rows(t, a); n != 0 {
		t.Fatalf("%d rows after a solo Begin, want none: the claim is held in memory", n)
	}
	if rec, found, err := a.Get(ctx, "held"); err != nil || !found || rec.State != "inflight" || rec.ClaimID != "C-1" {
		t.Fatalf("Get of a claim held in memory: %+v %v %v", rec, found, err)
	}
	if out, err := a.Finish(ctx, "done-1", claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil || out != claim.OutDelivered {
		t.Fatal(out, err)
	}
	if n := rows(t, a); n != 1 {
		t.Fatalf("%d rows after one record, want 1", n)
	}

	b := open(t, path, holderB)
	if a.isSolo() || b.isSolo() {
		t.Fatalf("solo after a second store opened: a %v, b %v", a.isSolo(), b.isSolo())
	}
	if got, err := b.Begin(ctx, "held", claim.Copy{Fresh: true}, time.Hour); err != nil || got.Result != claim.Busy {
		t.Fatalf("b on a's claim: %+v %v, want busy: a wrote it down before b's Open returned", got, err)
	}
	if out, err := a.Finish(ctx, "held", claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil || out != claim.OutDelivered {
		t.Fatal(out, err)
	}
	if got, _ := b.Begin(ctx, "held", claim.Copy{}, time.Hour); got.Result != claim.Done {
		t.Fatalf("b after a delivered it: %v, want done", got.Result)
	}
	rec, _, _ := b.Get(ctx, "held")
	if rec.ClaimID != "C-1" || rec.Attempts != 1 || !rec.Delivered() {
		t.Fatalf("the record of a claim begun solo and finished shared: %+v", rec)
	}
	// a is a sharer now: its claims are rows again.
	if got, _ := a.Begin(ctx, "later", claim.Copy{Fresh: true}, time.Hour); got.Result != claim.Acquired {
		t.Fatal("a could not begin")
	}
	if got, _ := b.Begin(ctx, "later", claim.Copy{Fresh: true}, time.Hour); got.Result != claim.Busy {
		t.Fatalf("b on a's new claim: %v, want busy", got.Result)
	}
	b.Close()
	c := open(t, path, Options{})
	if c.isSolo() {
		t.Fatal("a third store turned solo beside a sharer")
	}
}

// TestSoloRecord: in solo mode Finish alone writes the whole record, with
// what Begin read: the failure count of a redelivered copy, a fresh copy
// starting over, the claimId, a dead letter's reason, and a done record
// never overwritten.
func TestSoloRecord(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "p.db"), Options{})
	if !s.isSolo() {
		t.Fatal("not solo")
	}
	s.Begin(ctx, "g", claim.Copy{ClaimID: "C-g", Fresh: true}, time.Minute)
	if out, _ := s.Finish(ctx, "g", claim.Attempt{Status: 503, Outcome: claim.OutRetry, Called: true}); out != claim.OutRetry {
		t.Fatal(out)
	}
	if b, _ := s.Begin(ctx, "g", claim.Copy{}, time.Minute); b.Failures != 1 {
		t.Fatalf("redelivered: %+v, want 1 failure", b)
	}
	if out, _ := s.Finish(ctx, "g", claim.Attempt{Status: 503, Outcome: claim.OutFailed, Detail: "failed twice", Called: true}); out != claim.OutFailed {
		t.Fatal(out)
	}
	rec, _, _ := s.Get(ctx, "g")
	if rec.State != "dead" || rec.Failures != 1 || rec.Attempts != 2 || rec.ClaimID != "C-g" || rec.DeadReason != "failed twice" || rec.Outcome != claim.OutFailed {
		t.Fatalf("record: %+v", rec)
	}
	if b, _ := s.Begin(ctx, "g", claim.Copy{}, time.Minute); b.Result != claim.DeadBefore || b.Prior != claim.OutFailed {
		t.Fatalf("redelivered dead letter: %+v", b)
	}
	if b, _ := s.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Minute); b.Result != claim.Acquired || b.Failures != 0 {
		t.Fatalf("fresh copy of a dead letter: %+v", b)
	}
	if out, _ := s.Finish(ctx, "g", claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); out != claim.OutDelivered {
		t.Fatal(out)
	}
	if out, _ := s.Finish(ctx, "g", claim.Attempt{Status: 503, Outcome: claim.OutRetry, Called: true}); out != claim.OutDuplicate {
		t.Fatalf("a late failure after done: %v, want the duplicate outcome", out)
	}
	rec, _, _ = s.Get(ctx, "g")
	if !rec.Delivered() || rec.Attempts != 4 || rec.DeadReason != "failed twice" {
		t.Fatalf("record after done: %+v", rec)
	}
	as, _ := s.Attempts(ctx, "g")
	if len(as) != 3 {
		t.Fatalf("attempt log: %+v, want the 2 failures and the late duplicate", as)
	}
}
