package store

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"eaimq/internal/fail"
	"eaimq/internal/pgtest"
)

// TestOpenClass: Open's error carries the class the consumer exits with:
// Config (78, which the units do not restart) for a setting to fix, IO
// (74, which they restart) for the store's own failure or a server that
// does not answer. The real file system and the real server, each case.
func TestOpenClass(t *testing.T) {
	dir := t.TempDir()
	damaged := filepath.Join(dir, "damaged.db")
	if err := os.WriteFile(damaged, []byte("this is not an SQLite file, and it is long enough to have a header"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	pg := pgtest.New(t)
	for _, c := range []struct {
		name, location string
		o              Options
		want           fail.Class
	}{
		{"an SQLite store not there, NoCreate", filepath.Join(dir, "typo", "processed.db"), Options{NoCreate: true}, fail.Config},
		{"a device", "/dev/null", Options{}, fail.Config},
		{"a directory", dir, Options{}, fail.Config},
		{"a damaged file", damaged, Options{}, fail.IO},
		{"read-only, not there yet", filepath.Join(dir, "later.db"), Options{ReadOnly: true}, fail.IO},
		{"an empty database, NoCreate", pg, Options{NoCreate: true}, fail.Config},
		{"a database that does not exist", pg + "_not_there", Options{}, fail.Config},
		{"a server that does not listen", "postgres://postgres@" + closed + "/postgres?connect_timeout=2", Options{}, fail.IO},
	} {
		s, err := Open(c.location, c.o)
		if err == nil {
			s.Close()
		}
		if got := fail.Of(err); got != c.want {
			t.Errorf("%s: %v: class %v, want %v", c.name, err, got, c.want)
		}
	}
}
