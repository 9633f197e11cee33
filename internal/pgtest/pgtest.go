// Package pgtest gives each test its own temporary database on the real
// PostgreSQL server, dropped when the test ends. No test touches another
// test's database, and none is mocked.
package pgtest

import (
	"context"
	"crypto/rand"
	"eaimq/internal/redact"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvBaseURL overrides the server the tests use; its database is the one
// they connect to in order to create and drop theirs (default postgres).
const EnvBaseURL = "EAIMQ_TEST_PG_URL"

// DefaultBaseURL is the server scripts/pg-up.sh starts: trust
// authentication for user postgres over TCP on the loopback address.
const DefaultBaseURL = "postgres://postgres@127.0.0.1:5432/postgres"

const howToStart = "start it with scripts/pg-up.sh (or run scripts/test.sh, which does)"

// New creates a database with a random name, returns the postgres:// URL
// that reaches it, and drops it in t.Cleanup (terminating any session a
// test left on it, such as one holding a claim). It fails the test, saying
// how to start the server, when the server cannot be reached.
func New(t testing.TB) string {
	t.Helper()
	skipShort(t, "the PostgreSQL server")
	base := os.Getenv(EnvBaseURL)
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvBaseURL, err)
	}
	admin := connect(t, base)
	defer admin.Close(context.Background())

	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "eaimq_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		a := connect(t, base)
		defer a.Close(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := a.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

func connect(t testing.TB, base string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("PostgreSQL is not reachable at %s: %v; %s", redact.URL(base), err, howToStart)
	}
	return c
}

// skipShort skips t under go test -short, the contributors' fast loop that
// needs no server, saying what t needs instead (brokertest.SkipShort's
// rule). Without -short nothing is skipped: a server that cannot be
// reached fails the test, saying how to start it.
func skipShort(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("skipped under -short: needs %s", needs)
	}
}

// TerminateLockHolder ends, through c, the session that holds the advisory
// lock key (a claim's: postgres.LockKey), as an operator or a dead network
// would, and returns once that server process has exited (10 s at most),
// so that the lock is free. An error says no session held it.
func TerminateLockHolder(ctx context.Context, c *pgx.Conn, key int64) error {
	// A bigint advisory lock is listed split in two: classid the high 32
	// bits, objid the low, objsubid 1.
	k := uint64(key)
	var ok bool
	err := c.QueryRow(ctx, `SELECT pg_terminate_backend(pid, 10000) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND classid = $1 AND objid = $2 AND objsubid = 1`,
		int64(k>>32), int64(k&0xffffffff)).Scan(&ok)
	if err == nil && !ok {
		err = errors.New("pg_terminate_backend answered false")
	}
	return err
}
