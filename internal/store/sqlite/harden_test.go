package sqlite

import (
	"database/sql"
	"eaimq/internal/claim"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSymlinkedPath: EAI_MQ_DB may be a symbolic link (a dangling one
// too). SQLite keeps its WAL beside the real file, so the writer must fsync
// that one: a durable record through the link must succeed.
func TestSymlinkedPath(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real", "processed.db")
	os.MkdirAll(filepath.Dir(real), 0o700)
	for _, dangling := range []bool{false, true} {
		link := filepath.Join(dir, "link.db")
		os.Remove(link)
		os.Remove(real)
		os.Remove(real + "-wal")
		os.Remove(real + "-shm")
		if !dangling {
			s := open(t, real, Options{})
			s.Close()
		}
		if err := os.Symlink("real/processed.db", link); err != nil {
			t.Fatal(err)
		}
		s := open(t, link, Options{})
		if _, err := s.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Finish(ctx, "g", claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil {
			t.Fatalf("dangling=%v: a durable record through a symlink: %v", dangling, err)
		}
		if s.Path() != link {
			t.Errorf("Path() = %s, want the name the user gave", s.Path())
		}
		s.Close()
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("the link was replaced: %v %v", fi.Mode(), err)
		}
		if _, err := os.Stat(real + "-wal"); err != nil && !os.IsNotExist(err) {
			t.Error(err)
		}
		if _, err := os.Stat(link + "-wal"); err == nil {
			t.Errorf("a WAL beside the link")
		}
	}
}

// TestNotARegularFile: a device or a directory is refused, and nothing is
// left beside it.
func TestNotARegularFile(t *testing.T) {
	for _, p := range []string{"/dev/null", t.TempDir()} {
		_, err := Open(p, Options{})
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: %v, want refused as not a regular file", p, err)
		}
		if _, err := os.Stat(p + "-journal"); err == nil {
			t.Errorf("%s-journal was left behind", p)
			if p == "/dev/null" {
				os.Remove(p + "-journal")
			}
		}
	}
}

// TestAdoptsTheLabsFile: the lab's consumer.py keeps processed(message_id
// TEXT PRIMARY KEY, ...) at the default path. Its ids count as delivered;
// its table is left as it was.
func TestAdoptsTheLabsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "processed.db")
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE processed (message_id TEXT PRIMARY KEY, processed_at TEXT, note TEXT);
		INSERT INTO processed VALUES ('lab-1', '2026-01-01', 'x'), ('lab-2', NULL, NULL);`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s := open(t, path, Options{})
	for _, id := range []string{"lab-1", "lab-2"} {
		if b, err := s.Begin(ctx, id, claim.Copy{Fresh: true}, time.Minute); err != nil || b.Result != claim.Done {
			t.Errorf("%s: %+v %v, want done (the lab delivered it)", id, b, err)
		}
	}
	if b, _ := s.Begin(ctx, "new-1", claim.Copy{Fresh: true}, time.Minute); b.Result != claim.Acquired {
		t.Errorf("a new id: %v", b.Result)
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM processed WHERE note = 'x'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("the lab's table changed: %d %v", n, err)
	}
	s.Close()
	// Open again: nothing to migrate, still the same.
	s = open(t, path, Options{})
	if b, _ := s.Begin(ctx, "lab-2", claim.Copy{Fresh: true}, time.Minute); b.Result != claim.Done {
		t.Errorf("after reopen: %v", b.Result)
	}
}

// TestMigratesVersion1: a file written by the first schema gets its reasons
// from the sentences it recorded.
func TestMigratesVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "processed.db")
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	tx, _ := db.Begin()
	if _, err := tx.Exec(schema1); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO claims (message_id, state, last_status, dead_reason, updated_at) VALUES
			('r', 'dead', 422, 'rejected by the claim system', 1),
			('t', 'dead', 503, 'transient failure again after 1 retry', 1),
			('n', 'dead', 0, 'no message_id and no guid in the body', 1),
			('d', 'done', 201, NULL, 1),
			('f', 'failed', 503, NULL, 1)`,
		`INSERT INTO attempts (message_id, at, redelivered, status, action, latency_ms) VALUES ('r', 1, 0, 422, 'dead', 1), ('t', 1, 0, 503, 'requeue', 1)`,
		`PRAGMA user_version = 1`,
	} {
		if _, err := tx.Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	tx.Commit()
	db.Close()
	s := open(t, path, Options{})
	for id, want := range map[string]claim.Outcome{"r": claim.OutRejected, "t": claim.OutFailed, "n": claim.OutNoID, "d": claim.OutDelivered, "f": claim.OutRetry} {
		rec, _, err := s.Get(ctx, id)
		if err != nil || rec.Outcome != want {
			t.Errorf("%s: %+v %v, want %v", id, rec.Outcome, err, want)
		}
	}
	as, _ := s.Attempts(ctx, "r")
	if len(as) != 1 || as[0].Outcome != claim.OutRejected {
		t.Errorf("attempts of r: %+v", as)
	}
	// No dead-lettered copy's token on an old record: a redelivered copy
	// with one is rejected again, as before tokens.
	if b, err := s.Begin(ctx, "t", claim.Copy{Token: "t1"}, time.Minute); err != nil || b.Result != claim.DeadBefore {
		t.Errorf("a redelivered copy of migrated dead record t: %+v %v, want dead before", b, err)
	}
}
