package postgres

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"eaimq/internal/claim"
	"eaimq/internal/pgtest"
)

// PostgreSQL-only tests: the lock that lives with the holder's session,
// the pool, the migration lock. (The behaviour both backends share is
// tested in package store.)

var ctx = context.Background()

// Two holders in two processes, as in package store's tests.
var (
	holderA = Options{Owner: "elsewhere:1:1"}
	holderB = Options{Owner: "elsewhere:2:2"}
)

// openStore opens the store at loc and closes it when the test ends.
func openStore(t *testing.T, loc string, o Options) *Store {
	t.Helper()
	s, err := Open(loc, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// heldConnPID is the backend pid of the session holding s's claim on id.
func heldConnPID(t *testing.T, s *Store, id string) uint32 {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.claims[id]
	if c == nil || c.conn == nil {
		t.Fatalf("%s is not held by this store", id)
	}
	return c.conn.Conn().PgConn().PID()
}

// terminateHolder ends the session that holds s's claim on id, from
// another connection, as an operator (or a dead network) would, and
// returns when that backend has exited.
func terminateHolder(t *testing.T, s *Store, id string) {
	t.Helper()
	pid := heldConnPID(t, s, id)
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, int64(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate backend %d: %v %v", pid, ok, err)
	}
}

// TestPostgresDeadSessionReleasesAtOnce: when the holder's session ends,
// its claim is free at that moment, not after a lease; the holder, still
// alive, records its acceptance through another connection, and the new
// holder learns that the claim was delivered meanwhile.
func TestPostgresDeadSessionReleasesAtOnce(t *testing.T) {
	loc := pgtest.New(t)
	a, b := openStore(t, loc, holderA), openStore(t, loc, holderB)
	if got, _ := a.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); got.Result != claim.Acquired {
		t.Fatal("a did not acquire")
	}
	if got, _ := b.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); got.Result != claim.Busy {
		t.Fatalf("b: %v, want busy", got.Result)
	}
	terminateHolder(t, a, "g")
	if got, err := b.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); err != nil || got.Result != claim.Acquired {
		t.Fatalf("b right after a's session ended: %+v %v, want acquired", got, err)
	}
	if out, err := a.Finish(ctx, "g", claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil || out != claim.OutDelivered {
		t.Fatalf("a's acceptance after its session ended: %v %v", out, err)
	}
	if out, err := b.Finish(ctx, "g", claim.Attempt{Status: 503, Outcome: claim.OutRetry, Called: true}); err != nil || out != claim.OutDuplicate {
		t.Fatalf("b: %v %v, want duplicate", out, err)
	}
	// Nothing leaked: a takes and releases new claims as before.
	for i := range 10 {
		id := fmt.Sprint("n", i)
		if got, err := a.Begin(ctx, id, claim.Copy{Fresh: true}, time.Hour); err != nil || got.Result != claim.Acquired {
			t.Fatalf("%s: %+v %v", id, got, err)
		}
		if _, err := a.Finish(ctx, id, claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil {
			t.Fatal(err)
		}
	}
}

const (
	envHelper     = "EAIMQ_STORE_TEST_HOLDER" // the store's URL: be a holder process
	envHelperID   = "EAIMQ_STORE_TEST_HOLDER_ID"
	helperHolding = "holding"
)

// holdClaimAndWait is the helper process of TestPostgresKilledHolder: it
// takes a claim, says so, and waits to be killed.
func holdClaimAndWait() {
	s, err := Open(os.Getenv(envHelper), Options{})
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	b, err := s.Begin(ctx, os.Getenv(envHelperID), claim.Copy{Fresh: true}, time.Hour)
	if err != nil || b.Result != claim.Acquired {
		fmt.Println(b.Result, err)
		os.Exit(1)
	}
	fmt.Println(helperHolding)
	time.Sleep(time.Hour)
}

// TestPostgresKilledHolder: a consumer killed with -9 while it holds a
// claim releases it at once: its TCP connection closes with it, and the
// server ends its session and releases its lock.
func TestPostgresKilledHolder(t *testing.T) {
	loc := pgtest.New(t)
	s := openStore(t, loc, holderB)
	openStore(t, loc, Options{}).Close() // migrate before the helper
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelper+"="+loc, envHelperID+"=g")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != helperHolding {
		t.Fatalf("helper: %q", line)
	}
	if got, _ := s.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); got.Result != claim.Busy {
		t.Fatalf("while the helper holds it: %v, want busy", got.Result)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	cmd.Wait()
	killed := time.Now()
	// The backend notices the closed connection at once; it exits a few
	// milliseconds later. A lease would be minutes.
	for {
		got, err := s.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if got.Result == claim.Acquired {
			t.Logf("acquired %v after the kill", time.Since(killed).Round(time.Millisecond))
			break
		}
		if time.Since(killed) > 2*time.Second {
			t.Fatal("still busy 2 s after the holder was killed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPostgresNeverTwoHolders: many holders (a store each, as many
// consumers on several hosts) take, hold and finish claims on a few ids
// over and over; no id is ever held by two at once.
func TestPostgresNeverTwoHolders(t *testing.T) {
	loc := pgtest.New(t)
	const holders, ids, rounds = 12, 3, 40
	stores := make([]*Store, holders)
	for i := range stores {
		stores[i] = openStore(t, loc, Options{Conns: 1})
	}
	var inUse [ids]atomic.Int32
	var acquired, busy atomic.Int32
	var wg sync.WaitGroup
	for h, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				n := (h + r) % ids
				id := fmt.Sprint("g", n)
				got, err := s.Begin(ctx, id, claim.Copy{Fresh: true}, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if got.Result != claim.Acquired {
					busy.Add(1)
					continue
				}
				acquired.Add(1)
				if k := inUse[n].Add(1); k != 1 {
					t.Errorf("%s held by %d holders at once", id, k)
				}
				time.Sleep(time.Millisecond)
				inUse[n].Add(-1)
				if _, err := s.Finish(ctx, id, claim.Attempt{Status: 503, Outcome: claim.OutRetry, Called: true}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if acquired.Load() == 0 || busy.Load() == 0 {
		t.Fatalf("acquired %d, busy %d: the test did not contend", acquired.Load(), busy.Load())
	}
	t.Logf("acquired %d, busy %d", acquired.Load(), busy.Load())
}

// TestPostgresMigrationByManyOpensAtOnce: consumers started together on a
// new database migrate it once, under the migration lock; none fails.
func TestPostgresMigrationByManyOpensAtOnce(t *testing.T) {
	loc := pgtest.New(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(loc, Options{})
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		}()
	}
	wg.Wait()
	c, err := pgx.Connect(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var v, rows, n int
	if err := c.QueryRow(ctx, `SELECT max(version), count(*) FROM eaimq_schema`).Scan(&v, &rows); err != nil || v != pgSchemaVersion || rows != 1 {
		t.Fatalf("schema version %d in %d rows, %v", v, rows, err)
	}
	if err := c.QueryRow(ctx, `SELECT count(*) FROM processed`).Scan(&n); err != nil {
		t.Fatalf("processed view: %v", err)
	}
}

// TestPostgresCloseReleases: Close ends the sessions of the claims the
// store holds, so another holder takes them at once.
func TestPostgresCloseReleases(t *testing.T) {
	loc := pgtest.New(t)
	a, b := openStore(t, loc, holderA), openStore(t, loc, holderB)
	a.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour)
	a.Close()
	if got, err := b.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); err != nil || got.Result != claim.Acquired {
		t.Fatalf("after a's Close: %+v %v", got, err)
	}
	if _, err := a.Begin(ctx, "h", claim.Copy{Fresh: true}, time.Hour); err == nil {
		t.Fatal("Begin on a closed store succeeded")
	}
}

// TestPostgresConns: a store holds at most Options.Conns claims at once
// and says so, rather than wait for a connection that only its own Finish
// could free; outcomes decided without a claim and reads still go through.
func TestPostgresConns(t *testing.T) {
	loc := pgtest.New(t)
	s := openStore(t, loc, Options{Conns: 2})
	for _, id := range []string{"a", "b"} {
		if got, err := s.Begin(ctx, id, claim.Copy{Fresh: true}, time.Hour); err != nil || got.Result != claim.Acquired {
			t.Fatalf("%s: %+v %v", id, got, err)
		}
	}
	if _, err := s.Begin(ctx, "c", claim.Copy{Fresh: true}, time.Hour); err == nil || !strings.Contains(err.Error(), "Options.Conns") {
		t.Fatalf("a third claim: %v, want refused", err)
	}
	if _, err := s.Finish(ctx, "x", claim.Attempt{Outcome: claim.OutNoID, Detail: claim.ReasonNoID}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	s.Finish(ctx, "a", claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true})
	if got, err := s.Begin(ctx, "c", claim.Copy{Fresh: true}, time.Hour); err != nil || got.Result != claim.Acquired {
		t.Fatalf("after a Finish: %+v %v", got, err)
	}
}

// TestPostgresConnsBeyondTheServer: a store that could never get its
// connections is refused at Open, not at the Nth claim.
func TestPostgresConnsBeyondTheServer(t *testing.T) {
	loc := pgtest.New(t)
	_, err := Open(loc, Options{Conns: 65535})
	if err == nil || !strings.Contains(err.Error(), "max_connections") {
		t.Fatalf("Conns 65535: %v, want refused", err)
	}
}

// TestPostgresPruneSkipsHeldClaim: on PostgreSQL a record whose claim lock
// another session holds (a consumer's Begin reading it at that moment) is
// left for the next run, then pruned once the lock is free.
func TestPostgresPruneSkipsHeldClaim(t *testing.T) {
	loc := pgtest.New(t)
	s := openStore(t, loc, Options{})
	for _, id := range []string{"held", "free"} {
		if _, err := s.Finish(ctx, id, claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := pgx.Connect(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `SELECT pg_advisory_lock($1)`, LockKey("held")); err != nil {
		t.Fatal(err)
	}
	cutoff := time.Now().Add(time.Hour)
	if n, err := s.Prune(ctx, cutoff, 10); err != nil || n != 1 {
		t.Fatalf("Prune with one claim locked: %d %v, want 1", n, err)
	}
	if _, found, _ := s.Get(ctx, "held"); !found {
		t.Fatal("the locked claim's record was pruned")
	}
	if _, err := c.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(ctx, cutoff, 10); err != nil || n != 1 {
		t.Fatalf("Prune after the unlock: %d %v, want 1", n, err)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(envHelper) != "" {
		holdClaimAndWait()
		return
	}
	os.Exit(m.Run())
}
