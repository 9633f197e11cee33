package sqlite

import (
	"context"
	"eaimq/internal/claim"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// SQLite-only tests: the file itself, the lease, the dead process on this
// host. (harden_test.go has the file-system cases; the behaviour both
// backends share is tested in package store.)

var ctx = context.Background()

// Two holders in two processes: owners on another host, so that the store
// never takes either for a dead process of this one.
var (
	holderA = Options{Owner: "elsewhere:1:1"}
	holderB = Options{Owner: "elsewhere:2:2"}
)

func open(t *testing.T, path string, o Options) *Store {
	t.Helper()
	s, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSQLiteFile: the file is created 0600 in a new directory, and the lab's
// word for the record, the processed view, lists delivered ids.
func TestSQLiteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "processed.db")
	s := open(t, path, Options{})
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode: %v %v", fi.Mode(), err)
	}
	s.Begin(ctx, "g1", claim.Copy{ClaimID: "C-1", Fresh: true}, time.Minute)
	s.Finish(ctx, "g1", claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true})
	s.Begin(ctx, "g2", claim.Copy{ClaimID: "C-2", Fresh: true}, time.Minute)
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM processed`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("processed view: %d %v", n, err)
	}
}

// TestSQLiteLeaseRunsOut: a claim whose holder stops answering is free
// again when its lease has run out.
func TestSQLiteLeaseRunsOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	a := open(t, path, Options{Owner: "elsewhere:1:1"})
	b := open(t, path, Options{})
	if got, _ := a.Begin(ctx, "g", claim.Copy{Fresh: true}, 300*time.Millisecond); got.Result != claim.Acquired {
		t.Fatal("a did not acquire")
	}
	if got, _ := b.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Minute); got.Result != claim.Busy {
		t.Fatalf("b: %v, want busy while a's lease runs", got.Result)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := b.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got.Result == claim.Acquired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease never expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDeadOwnerOnThisHostIsTakenAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	host, _ := os.Hostname()
	// pid 1's start time is never "x": the owner is gone.
	a := open(t, path, Options{Owner: fmt.Sprintf("%s:1:x", host)})
	b := open(t, path, Options{})
	a.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour)
	if got, _ := b.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); got.Result != claim.Acquired {
		t.Fatalf("b: %v, want acquired: the owner no longer runs", got.Result)
	}
}
