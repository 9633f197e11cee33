package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func open(t *testing.T, path string, o Options) *SQLite {
	t.Helper()
	s, err := OpenSQLite(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var ctx = context.Background()

func TestDedupLifecycle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "processed.db")
	s := open(t, path, Options{})
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode: %v %v", fi.Mode(), err)
	}
	b, err := s.Begin(ctx, "g1", "C-1", true, time.Minute)
	if err != nil || b.Result != Acquired || b.Failures != 0 {
		t.Fatalf("first Begin: %+v %v", b, err)
	}
	// A transient failure, then the redelivered copy sees it.
	if _, err := s.Finish(ctx, "g1", Attempt{Status: 503, Outcome: OutRetry, Called: true}); err != nil {
		t.Fatal(err)
	}
	if b, _ := s.Begin(ctx, "g1", "", false, time.Minute); b.Result != Acquired || b.Failures != 1 {
		t.Fatalf("redelivered Begin: %+v, want acquired with 1 failure", b)
	}
	// A fresh copy of the same id starts over.
	if b, _ := s.Begin(ctx, "g1", "", true, time.Minute); b.Result != Acquired || b.Failures != 0 {
		t.Fatalf("fresh Begin: %+v, want acquired with 0 failures", b)
	}
	if out, err := s.Finish(ctx, "g1", Attempt{Status: 201, Outcome: OutDelivered, Called: true}); err != nil || out != OutDelivered {
		t.Fatal(out, err)
	}
	if b, _ := s.Begin(ctx, "g1", "", true, time.Minute); b.Result != Done {
		t.Fatalf("after ack: %v, want done", b.Result)
	}
	s.Close()
	// The record survives a restart.
	s2 := open(t, path, Options{})
	if b, _ := s2.Begin(ctx, "g1", "", true, time.Minute); b.Result != Done {
		t.Fatalf("after reopen: %v, want done", b.Result)
	}
	rec, found, err := s2.Get(ctx, "g1")
	if err != nil || !found || !rec.Delivered() || rec.Attempts != 2 || rec.ClaimID != "C-1" || rec.LastStatus != 201 || rec.Outcome != OutDelivered {
		t.Fatalf("record: %+v %v %v", rec, found, err)
	}
	as, err := s2.Attempts(ctx, "g1")
	// The log keeps the failure; the success is told by the record.
	if err != nil || len(as) != 1 || as[0].Status != 503 || as[0].Outcome != OutRetry {
		t.Fatalf("attempts: %+v %v", as, err)
	}
	var n int
	if err := s2.db.QueryRow(`SELECT count(*) FROM processed`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("processed view: %d %v", n, err)
	}
}

func TestLeaseBetweenProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	a := open(t, path, Options{Owner: "elsewhere:1:1"})
	b := open(t, path, Options{})
	if got, _ := a.Begin(ctx, "g", "", true, 300*time.Millisecond); got.Result != Acquired {
		t.Fatal("a did not acquire")
	}
	if got, _ := b.Begin(ctx, "g", "", true, time.Minute); got.Result != Busy {
		t.Fatalf("b: %v, want busy while a's lease runs", got.Result)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := b.Begin(ctx, "g", "", true, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got.Result == Acquired {
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
	a.Begin(ctx, "g", "", true, time.Hour)
	if got, _ := b.Begin(ctx, "g", "", true, time.Hour); got.Result != Acquired {
		t.Fatalf("b: %v, want acquired: the owner no longer runs", got.Result)
	}
}

// TestOneWinnerUnderConcurrency: many goroutines on two stores (two
// processes sharing one file) race for one id; exactly one gets it.
func TestOneWinnerUnderConcurrency(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	stores := []*SQLite{open(t, path, Options{Owner: "x:1:1"}), open(t, path, Options{Owner: "y:2:2"})}
	for round := range 20 {
		id := fmt.Sprintf("g%d", round)
		var won atomic.Int32
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := stores[i%2].Begin(ctx, id, "", true, time.Minute)
				if err != nil {
					t.Error(err)
				}
				if got.Result == Acquired {
					won.Add(1)
				}
			}()
		}
		wg.Wait()
		// The same owner may take its own claim twice; across owners only
		// one. Each store asks 8 times: at most one of the two owners won.
		var owners int
		for _, s := range stores {
			var o sql.NullString
			s.db.QueryRow(`SELECT owner FROM claims WHERE message_id = ?`, id).Scan(&o)
			if o.String == s.owner {
				owners++
			}
		}
		if owners != 1 || won.Load() == 0 {
			t.Fatalf("round %d: %d owners hold it, %d acquired", round, owners, won.Load())
		}
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	s := open(t, path, Options{})
	if _, err := s.db.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(path, Options{}); err == nil {
		t.Fatal("a newer schema was accepted")
	}
}
