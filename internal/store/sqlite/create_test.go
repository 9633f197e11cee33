package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/mattn/go-sqlite3"
)

// TestCreate: a store opened where there is none is created (0600, with
// its directory) and says so, with the full path, once: a second open
// created nothing. NoCreate refuses a missing file with ErrNoStore, which
// Misconfigured is, and creates neither the file nor its directory; it
// opens a file that is there.
func TestCreate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "b", "processed.db")

	_, err := Open(path, Options{NoCreate: true})
	if !errors.Is(err, ErrNoStore) || !Misconfigured(err) || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), "the directory "+filepath.Join(dir, "a")+" does not exist either") {
		t.Fatalf("NoCreate where there is nothing: %v, want ErrNoStore naming %s and its missing directory", err, path)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Fatalf("NoCreate left %s behind (%v)", filepath.Join(dir, "a"), err)
	}

	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := "a new SQLite file " + path + " (mode 0600), in the new directory " + filepath.Dir(path) + " (created from " + filepath.Join(dir, "a") + " down)"
	if got := s.Created(); got != want {
		t.Errorf("Created() = %q, want %q", got, want)
	}
	s.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%v %v, want mode 0600", fi, err)
	}

	for _, o := range []Options{{}, {NoCreate: true}, {ReadOnly: true}} {
		s, err := Open(path, o)
		if err != nil {
			t.Fatalf("%+v on the store that is there: %v", o, err)
		}
		if s.Created() != "" {
			t.Errorf("%+v on the store that is there: Created() = %q, want nothing", o, s.Created())
		}
		s.Close()
	}

	// The directory there, the file not: said so too.
	other := filepath.Join(dir, "a", "other.db")
	if _, err := Open(other, Options{NoCreate: true}); !errors.Is(err, ErrNoStore) || !strings.Contains(err.Error(), "the directory is there, the file is not") {
		t.Errorf("NoCreate, the directory there: %v", err)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("NoCreate left %s behind (%v)", other, err)
	}
}

// TestMisconfigured: the errors only a person can fix (no store where one
// must be, not a file, a permission, a read-only file system, a schema
// from a newer release) apart from the store's own (a damaged file, an I/O
// error, a full disk).
func TestMisconfigured(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("dedup store x: %w", ErrNoStore), true},
		{fmt.Errorf("dedup store x: %w (device)", errNotRegular), true},
		{NewerSchemaError{Have: 9, Want: SchemaVersion}, true},
		{fmt.Errorf("dedup store x: %w", NewerSchemaError{Have: 9, Want: SchemaVersion}), true},
		{&os.PathError{Op: "open", Path: "x", Err: syscall.EACCES}, true},
		{&os.PathError{Op: "mkdir", Path: "x", Err: syscall.EROFS}, true},
		{&os.PathError{Op: "stat", Path: "x/y", Err: syscall.ENOTDIR}, true},
		{sqlite3.Error{Code: sqlite3.ErrReadonly}, true}, // a root-owned -shm
		{sqlite3.Error{Code: sqlite3.ErrCantOpen, SystemErrno: syscall.EACCES}, true},
		{sqlite3.Error{Code: sqlite3.ErrCantOpen, SystemErrno: syscall.ENOENT}, false},
		{sqlite3.Error{Code: sqlite3.ErrCorrupt}, false},
		{sqlite3.Error{Code: sqlite3.ErrNotADB}, false},
		{sqlite3.Error{Code: sqlite3.ErrFull}, false},
		{sqlite3.Error{Code: sqlite3.ErrIoErr, SystemErrno: syscall.EIO}, false},
		{&os.PathError{Op: "stat", Path: "x", Err: syscall.ENOENT}, false}, // read-only, the consumer has not made it yet
		{&os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}, false},
	} {
		if got := Misconfigured(c.err); got != c.want {
			t.Errorf("Misconfigured(%v) = %v, want %v", c.err, got, c.want)
		}
		if Misconfigured(c.err) && Transient(c.err) {
			t.Errorf("%v is both misconfigured and transient", c.err)
		}
	}
}

// TestOpenNewFileConcurrently: consumers started together on one new
// file (two relays on one store, a restart of several) all open it.
// Their first statements race for the file: the switch to WAL and the
// schema's creation take locks that SQLite may refuse at once, without
// waiting out the busy timeout, so Open retries what it refused. Rounds
// of eight opens at once, each on a new file.
func TestOpenNewFileConcurrently(t *testing.T) {
	for round := range 20 {
		path := filepath.Join(t.TempDir(), "processed.db")
		const n = 8
		errs := make(chan error, n)
		var start sync.WaitGroup
		start.Add(1)
		for range n {
			go func() {
				start.Wait()
				s, err := Open(path, Options{})
				if err == nil {
					err = s.Close()
				}
				errs <- err
			}()
		}
		start.Done()
		for range n {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
