package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/mattn/go-sqlite3"
)

func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{sqlite3.Error{Code: sqlite3.ErrFull}, true},
		{fmt.Errorf("finish: %w", sqlite3.Error{Code: sqlite3.ErrBusy}), true},
		{sqlite3.Error{Code: sqlite3.ErrIoErr, SystemErrno: syscall.ENOSPC}, true},
		{&os.PathError{Op: "fdatasync", Path: "x-wal", Err: syscall.ENOSPC}, true},
		{sqlite3.Error{Code: sqlite3.ErrCorrupt}, false},
		{sqlite3.Error{Code: sqlite3.ErrIoErr, SystemErrno: syscall.EIO}, false},
		{sqlite3.Error{Code: sqlite3.ErrReadonly}, false},
		{errors.New("schema version 9 is newer than this program's 4"), false},
		{&os.PathError{Op: "open", Path: "x", Err: syscall.EACCES}, false},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
