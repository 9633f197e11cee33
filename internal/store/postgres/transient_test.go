package postgres

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57P01"}, true}, // admin shutdown
		{&pgconn.PgError{Code: "57P03"}, true}, // starting up
		{&pgconn.PgError{Code: "08006"}, true}, // connection failure
		{&pgconn.PgError{Code: "25006"}, true}, // a standby, read-only
		{fmt.Errorf("record: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{pgconn.ErrConnClosed, true},
		{&pgconn.PgError{Code: "42501"}, false}, // insufficient privilege
		{&pgconn.PgError{Code: "42P01"}, false}, // undefined table
		{errors.New("schema version 9 is newer than this program's 2"), false},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
