package postgres

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"eaimq/internal/pgtest"
)

// TestPostgresCreate: in an empty database NoCreate refuses with
// ErrNoStore and creates no table; Open creates the tables and says so,
// naming the database; a second Open, NoCreate or not, created nothing. A
// read-only open of an empty database says it holds no store.
func TestPostgresCreate(t *testing.T) {
	loc := pgtest.New(t)
	if _, err := Open(loc, Options{NoCreate: true}); !errors.Is(err, ErrNoStore) || !Misconfigured(err) {
		t.Fatalf("NoCreate on an empty database: %v, want ErrNoStore", err)
	}
	if _, err := Open(loc, Options{ReadOnly: true}); err == nil || !strings.Contains(err.Error(), "no eaimq_schema table") {
		t.Fatalf("read-only on an empty database: %v", err)
	}
	if n := tables(t, loc); n != 0 {
		t.Fatalf("the refused opens created %d tables", n)
	}
	s := openStore(t, loc, Options{})
	if got := s.Created(); !strings.HasPrefix(got, "the tables of a new store in postgres://") || !strings.Contains(got, s.Path()) {
		t.Errorf("Created() = %q, want the tables named with %s", got, s.Path())
	}
	if n := tables(t, loc); n == 0 {
		t.Fatal("Open created no table")
	}
	for _, o := range []Options{{}, {NoCreate: true}, {ReadOnly: true}} {
		if s := openStore(t, loc, o); s.Created() != "" {
			t.Errorf("%+v on the store that is there: Created() = %q", o, s.Created())
		}
	}
}

// TestPostgresMisconfiguredOnTheServer: what the real server answers for a
// database that does not exist and a role it does not know is a setting
// to fix; a server that does not listen is not (it is Transient).
func TestPostgresMisconfiguredOnTheServer(t *testing.T) {
	loc := pgtest.New(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	for _, c := range []struct {
		name, url string
		want      bool
	}{
		{"no such database", loc + "_not_there", true},
		{"no such role", strings.Replace(loc, "postgres://postgres@", "postgres://eaimq_no_such_role@", 1), true},
		{"a URL that does not parse", "postgres://x:y@[::1", true},
		{"nobody listening", "postgres://postgres@" + closed + "/postgres?connect_timeout=2", false},
	} {
		_, err := Open(c.url, Options{})
		if err == nil || Misconfigured(err) != c.want || (!c.want && !Transient(err)) {
			t.Errorf("%s: %v: Misconfigured %v, want %v", c.name, err, Misconfigured(err), c.want)
		}
	}
}

// TestMisconfigured: the server's answers only a person can fix, apart
// from those that pass.
func TestMisconfigured(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "3D000"}, true}, // the database does not exist
		{&pgconn.PgError{Code: "28P01"}, true}, // password
		{&pgconn.PgError{Code: "28000"}, true}, // no such role, pg_hba.conf
		{&pgconn.PgError{Code: "42501"}, true}, // insufficient privilege
		{fmt.Errorf("open: %w", ErrNoStore), true},
		{NewerSchemaError{Have: 9, Want: pgSchemaVersion}, true},
		{fmt.Errorf("3 claims need 6 connections (%w)", errTooFewConns), true},
		{&pgconn.PgError{Code: "57P03"}, false}, // starting up
		{&pgconn.PgError{Code: "08006"}, false}, // connection failure
		{&pgconn.PgError{Code: "53100"}, false}, // disk full
		{&pgconn.PgError{Code: "42P01"}, false}, // undefined table: the store's own
	} {
		if got := Misconfigured(c.err); got != c.want {
			t.Errorf("Misconfigured(%v) = %v, want %v", c.err, got, c.want)
		}
		if Misconfigured(c.err) && Transient(c.err) {
			t.Errorf("%v is both misconfigured and transient", c.err)
		}
	}
}

// tables counts the tables in the database loc names.
func tables(t *testing.T, loc string) int {
	t.Helper()
	c, err := pgx.Connect(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
