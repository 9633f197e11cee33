package sqlite

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"eaimq/internal/audit"
	"eaimq/internal/claim"
)

// TestBackupWhileWriting: docs/operations.md backs the store up while the
// consumer runs with VACUUM INTO (sqlite3 FILE "VACUUM INTO 'COPY'"), a
// consistent copy taken in one read transaction that never blocks the
// writer, and copies dlq's audit trail beside it. Every claim delivered
// before the backup began is a delivered record in the copy, so a consumer
// restored from it acks their copies without a call; the copy is a sound
// SQLite file, and the store it came from went on writing throughout. The
// restore follows the page: the old file, its -wal, -shm and -lock moved
// aside, the copy in their place; the audit trail in place kept (it has
// the entries after the backup too), or the copy's when it was lost. Every
// file the store left beside it is one the page's table names.
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
	// dlq acted before the backup, and acts again after it.
	trail, err := audit.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	before := audit.Entry{At: time.Now(), Who: "ops", Via: "dlq replay", Action: "replay", Target: "w0-000", IDs: []string{"w0-000"}, Result: audit.Done}
	if err := trail.Append(ctx, before); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if _, err := db.Exec(`VACUUM INTO ?`, copyPath); err != nil {
		t.Fatalf("VACUUM INTO while the store writes: %v", err)
	}
	copyFile(t, audit.FilePath(path), audit.FilePath(copyPath)) // cp, as the page does
	during := finished.Load()
	wg.Wait()
	after := audit.Entry{At: time.Now(), Who: "ops", Via: "dlq purge", Action: "purge", Target: "w1-000", IDs: []string{"w1-000"}, Result: audit.Done}
	if err := trail.Append(ctx, after); err != nil {
		t.Fatal(err)
	}
	if during >= workers*perWorker {
		t.Fatalf("the writers had finished before the backup did (%d claims): it was not taken under load", during)
	}

	var ok string
	if err := db.QueryRow(`SELECT integrity_check FROM pragma_integrity_check() LIMIT 1`).Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("the store after the backup: %q %v", ok, err)
	}
	db.Close()

	// Every file beside the running store is one the page names (the
	// -wal and -shm go when the last connection closes).
	checkNamed(t, path)
	// The restore: the consumer stopped, the store's files moved aside,
	// the copy in place.
	s.Close()
	restore(t, path, copyPath)
	if got := trailIDs(t, path); !slices.Equal(got, []string{"w0-000", "w1-000"}) {
		t.Errorf("the audit trail kept in place reads %v, want both entries, the one after the backup too", got)
	}
	// The trail lost with the store: the copy's, up to the backup.
	s = open(t, path, Options{})
	s.Close()
	os.Remove(audit.FilePath(path))
	restore(t, path, copyPath)
	if got := trailIDs(t, path); !slices.Equal(got, []string{"w0-000"}) {
		t.Errorf("the audit trail restored from the copy reads %v, want the entry before the backup", got)
	}

	restored := open(t, path, Options{NoCreate: true})
	if restored.Created() != "" {
		t.Errorf("the restored store was created anew: %s", restored.Created())
	}
	delivered := 0
	for id, at := range doneAt {
		if !at.Before(began) {
			continue
		}
		delivered++
		if b, err := restored.Begin(ctx, id, claim.Copy{Fresh: true}, time.Minute); err != nil || b.Result != claim.Done {
			t.Fatalf("%s, delivered before the backup: %+v %v in the restored copy, want done (acked without a call)", id, b, err)
		}
	}
	if delivered == 0 {
		t.Fatal("no claim was delivered before the backup began")
	}
	// A claim never delivered is new to the copy too.
	if b, err := restored.Begin(ctx, "never-seen", claim.Copy{Fresh: true}, time.Minute); err != nil || b.Result != claim.Acquired {
		t.Fatalf("a new id in the restored copy: %+v %v", b, err)
	}
	t.Logf("%d claims delivered before the backup began, %d by the time it ended, %d in all", delivered, during, workers*perWorker)
}

// restore is the page's restore of the backup at copyPath into path: the
// store's files moved aside (those that are there), the copy installed
// 0600, and the audit trail's copy only where there is none.
func restore(t *testing.T, path, copyPath string) {
	t.Helper()
	broken := filepath.Join(filepath.Dir(path), "broken")
	os.RemoveAll(broken)
	if err := os.Mkdir(broken, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"", "-wal", "-shm", "-journal", "-lock"} {
		if err := os.Rename(path+suffix, filepath.Join(broken, filepath.Base(path)+suffix)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	copyFile(t, copyPath, path)
	if _, err := os.Stat(audit.FilePath(path)); os.IsNotExist(err) {
		copyFile(t, audit.FilePath(copyPath), audit.FilePath(path))
	}
	for _, suffix := range []string{"-wal", "-shm", "-journal", "-lock"} {
		if _, err := os.Stat(path + suffix); !os.IsNotExist(err) {
			t.Errorf("%s%s is still there after the restore (%v)", path, suffix, err)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// trailIDs is what dlq history reads from the trail of the store at path:
// the ids of each entry, oldest first.
func trailIDs(t *testing.T, path string) []string {
	t.Helper()
	trail, err := audit.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer trail.Close()
	var ids []string
	if err := trail.Entries(ctx, "", func(e audit.Entry) error { ids = append(ids, e.IDs...); return nil }); err != nil {
		t.Fatal(err)
	}
	return ids
}

// checkNamed fails unless docs/operations.md's backup table names every
// file the store at path left beside it (the store, its SQLite files, its
// lock file, dlq's audit trail): a file the page forgets is one a backup
// made by the page loses, or a restore leaves stale.
func checkNamed(t *testing.T, path string) {
	t.Helper()
	page, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(page), "### SQLite")
	section, _, _ = strings.Cut(section, "### PostgreSQL")
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Base(path)
	seen := 0
	for _, e := range entries {
		suffix, ok := strings.CutPrefix(e.Name(), base)
		if !ok {
			continue
		}
		seen++
		if !strings.Contains(section, "`partner-a.db"+suffix+"`") {
			t.Errorf("the store keeps %s beside it, and docs/operations.md's backup table does not name partner-a.db%s", e.Name(), suffix)
		}
	}
	if seen < 5 { // the file, -wal, -shm, -lock, the trail
		t.Errorf("only %d of the store's files found beside it: the check checked little", seen)
	}
}
