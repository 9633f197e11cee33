package sqlite

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"eaimq/internal/claim"
)

// TestBackupWhileWriting: docs/operations.md backs the store up while the
// consumer runs with VACUUM INTO (sqlite3 FILE "VACUUM INTO 'COPY'"), a
// consistent copy taken in one read transaction that never blocks the
// writer. Every claim delivered before the backup began is a delivered
// record in the copy, so a consumer restored from it acks their copies
// without a call; the copy is a sound SQLite file, and the store it came
// from went on writing throughout.
func TestBackupWhileWriting(t *testing.T) {
	dir := t.TempDir()
	path, copyPath := filepath.Join(dir, "processed.db"), filepath.Join(dir, "backup", "processed.db")
	os.MkdirAll(filepath.Dir(copyPath), 0o700)
	s := open(t, path, Options{})

	const workers, perWorker = 4, 400
	var finished atomic.Int64
	var mu sync.Mutex
	doneAt := map[string]time.Time{} // when each claim's Finish returned
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				id := fmt.Sprintf("w%d-%03d", w, i)
				if _, err := s.Begin(ctx, id, claim.Copy{ClaimID: "C-" + id, Fresh: true}, time.Minute); err != nil {
					t.Error(err)
					return
				}
				if _, err := s.Finish(ctx, id, claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				doneAt[id] = time.Now()
				mu.Unlock()
				finished.Add(1)
			}
		}()
	}
	// The backup starts while the writers are a quarter of the way through
	// (a gate, not a sleep), and they go on while it runs.
	for finished.Load() < workers*perWorker/4 {
		time.Sleep(time.Millisecond)
	}
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	began := time.Now()
	if _, err := db.Exec(`VACUUM INTO ?`, copyPath); err != nil {
		t.Fatalf("VACUUM INTO while the store writes: %v", err)
	}
	during := finished.Load()
	wg.Wait()
	if during >= workers*perWorker {
		t.Fatalf("the writers had finished before the backup did (%d claims): it was not taken under load", during)
	}

	var ok string
	if err := db.QueryRow(`SELECT integrity_check FROM pragma_integrity_check() LIMIT 1`).Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("the store after the backup: %q %v", ok, err)
	}
	restored := open(t, copyPath, Options{})
	before := 0
	for id, at := range doneAt {
		if !at.Before(began) {
			continue
		}
		before++
		if b, err := restored.Begin(ctx, id, claim.Copy{Fresh: true}, time.Minute); err != nil || b.Result != claim.Done {
			t.Fatalf("%s, delivered before the backup: %+v %v in the restored copy, want done (acked without a call)", id, b, err)
		}
	}
	if before == 0 {
		t.Fatal("no claim was delivered before the backup began")
	}
	// A claim never delivered is new to the copy too.
	if b, err := restored.Begin(ctx, "never-seen", claim.Copy{Fresh: true}, time.Minute); err != nil || b.Result != claim.Acquired {
		t.Fatalf("a new id in the restored copy: %+v %v", b, err)
	}
	t.Logf("%d claims delivered before the backup began, %d by the time it ended, %d in all", before, during, workers*perWorker)
}
