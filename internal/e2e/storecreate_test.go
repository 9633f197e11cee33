package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/pgtest"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// production is the production profile as these tests run it: without
// its delayed retries (the lab's topology has no delay queues) and its
// fixed metrics port (tests run in parallel). What it does to the store
// is the profile's own.
var production = []string{"--profile", "production", "--retry-delays", "", "--metrics-addr", "", "--max-seconds", "3"}

// TestStoreTypo is issue 31's first item as it happened: a claim
// delivered with one store, then the same claim again to a consumer whose
// EAI_MQ_DB has a typo in its directory. The lab's default creates the
// store it is given, and says so in one line with the full path; the
// production profile refuses (78), naming the path and the fix, creates
// neither file nor directory, and leaves the claim in claim.in without a
// call; dlq, which reads the store, creates none either. With the right
// path the claim is acked as a duplicate, without a call.
func TestStoreTypo(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	dir := t.TempDir()
	right := filepath.Join(dir, "processed", "processed.db")
	typo := filepath.Join(dir, "procesed", "processed.db")

	// The lab's default: the store and its directory are created, and
	// said so.
	w.publishFiles(brokertest.Claim("typo-1", "C-typo-1", "r.pdf"))
	r := w.runEnv([]string{store.EnvPath + "=" + right}, "consumer", "--claim", w.url, "--max-seconds", "3")
	if r.code != 0 || !strings.Contains(r.stdout, "1 delivered") {
		t.Fatalf("lab run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := strings.Count(r.stderr, "created the dedup store: a new SQLite file "+right+" (mode 0600), in the new directory "+filepath.Dir(right)); n != 1 {
		t.Errorf("the lab's run said %d times that it created %s, want once:\n%s", n, right, r.stderr)
	}
	if fi, err := os.Stat(right); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the store the lab's run created: %v %v, want mode 0600", fi, err)
	}

	// The same claim again, to a production consumer with the typo.
	w.publishFiles(brokertest.Claim("typo-1", "C-typo-1", "r.pdf"))
	r = w.runEnv([]string{store.EnvPath + "=" + typo}, "consumer", append([]string{"--claim", w.url}, production...)...)
	if r.code != cli.ExitConfig || !brokertest.ContainsAll(r.stderr, typo, "--init-store", "EAI_MQ_DB") || r.stdout != "" {
		t.Fatalf("production with a store that is not there: exit %d, want %d naming %s and the fix\n%s%s", r.code, cli.ExitConfig, typo, r.stdout, r.stderr)
	}
	if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; lines != 1 {
		t.Errorf("the refusal is %d lines, want one:\n%s", lines, r.stderr)
	}
	// dlq reads the store, and never creates one either.
	for _, args := range [][]string{{"list"}, {"replay", "-all"}} {
		if r := w.runEnv([]string{store.EnvPath + "=" + typo}, "dlq", args...); r.code == 0 && args[0] == "replay" {
			t.Errorf("dlq %q without its store: exit 0\n%s%s", args, r.stdout, r.stderr)
		}
	}
	if _, err := os.Stat(filepath.Dir(typo)); !os.IsNotExist(err) {
		t.Errorf("the refused runs left %s behind (%v)", filepath.Dir(typo), err)
	}
	if calls := w.partner.Stats().ByGuid["typo-1"]; calls != 1 {
		t.Errorf("the partner was called %d times for typo-1, want once", calls)
	}
	if d := w.vh.Depth(t, topo.Queue); d != 1 {
		t.Errorf("claim.in holds %d, want the claim left there", d)
	}

	// With the right path the copy is a duplicate: acked, no call.
	r = w.runEnv([]string{store.EnvPath + "=" + right}, "consumer", append([]string{"--claim", w.url}, production...)...)
	if r.code != 0 || strings.Contains(r.stderr, "created the dedup store") {
		t.Fatalf("production with the store: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if calls := w.partner.Stats().ByGuid["typo-1"]; calls != 1 || w.vh.Depth(t, topo.Queue) != 0 {
		t.Errorf("after the run with the right store: %d calls for typo-1, claim.in %d; want 1 and 0", calls, w.vh.Depth(t, topo.Queue))
	}
}

// TestInitStore: a first deployment under the production profile creates
// the store with consumer --init-store (docs/operations.md), which says
// what it created in one line on stdout and exits 0; run again, it says the
// store is there and changes nothing. The consumer then starts under the
// production profile and delivers.
func TestInitStore(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	path := filepath.Join(t.TempDir(), "eaimq", "partner-a.db")
	env := []string{store.EnvPath + "=" + path}

	r := w.runEnv(env, "consumer", "--init-store", "--profile", "production")
	if r.code != 0 || r.stdout != "consumer: created the dedup store: a new SQLite file "+path+" (mode 0600), in the new directory "+filepath.Dir(path)+"\n" {
		t.Fatalf("--init-store: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the store --init-store created: %v %v, want mode 0600", fi, err)
	}
	before := fi.ModTime()
	r = w.runEnv(env, "consumer", "--init-store")
	if r.code != 0 || r.stdout != "consumer: the dedup store "+path+" is there already: nothing created\n" {
		t.Fatalf("--init-store again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if fi, err := os.Stat(path); err != nil || !fi.ModTime().Equal(before) || fi.Mode().Perm() != 0o600 {
		t.Errorf("--init-store again changed the store: %v %v", fi, err)
	}

	w.publishFiles(brokertest.Claim("init-1", "C-init-1", "r.pdf"))
	r = w.runEnv(env, "consumer", append([]string{"--claim", w.url}, production...)...)
	if r.code != 0 || w.partner.Stats().Accepted["init-1"] != 1 || strings.Contains(r.stderr, "created the dedup store") {
		t.Fatalf("production after --init-store: exit %d, accepted %d\n%s%s", r.code, w.partner.Stats().Accepted["init-1"], r.stdout, r.stderr)
	}
}

// TestStoreCreationPostgres: the same on PostgreSQL, where a new store is
// the tables in an empty database. The production profile refuses an
// empty database (78) and creates no table in it, nor does dlq; --init-store creates
// them and says so; the consumer then starts. A database that does not
// exist on the server is a setting to fix, 78, which the units do not
// restart (they restarted forever on 74), for the consumer and for dlq; a
// role the server does not know is one too.
func TestStoreCreationPostgres(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	db := pgtest.New(t)
	env := []string{store.EnvPath + "=" + db}

	w.publishFiles(brokertest.Claim("pg-init-1", "C-pg-init-1", "r.pdf"))
	r := w.runEnv(env, "consumer", append([]string{"--claim", w.url}, production...)...)
	if r.code != cli.ExitConfig || !brokertest.ContainsAll(r.stderr, "no eaimq_schema table", "--init-store") {
		t.Fatalf("production on an empty database: exit %d, want %d\n%s%s", r.code, cli.ExitConfig, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"list"}, {"replay", "-all"}} { // dlq never creates a store
		if r := w.runEnv(env, "dlq", args...); r.code == 0 && args[0] == "replay" {
			t.Errorf("dlq %q on an empty database: exit 0\n%s%s", args, r.stdout, r.stderr)
		}
	}
	if tables := pgTables(t, db); tables != 0 {
		t.Errorf("the refused runs created %d tables", tables)
	}

	r = w.runEnv(env, "consumer", "--init-store")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "consumer: created the dedup store: the tables of a new store in postgres://") {
		t.Fatalf("--init-store: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = w.runEnv(env, "consumer", "--init-store"); r.code != 0 || !strings.Contains(r.stdout, "is there already: nothing created") {
		t.Fatalf("--init-store again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = w.runEnv(env, "consumer", append([]string{"--claim", w.url}, production...)...)
	if r.code != 0 || w.partner.Stats().Accepted["pg-init-1"] != 1 {
		t.Fatalf("production after --init-store: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	missing := db + "_not_there"
	for _, c := range []struct{ name, url, want string }{
		{"a database that does not exist", missing, "does not exist"},
		{"a role the server does not know", strings.Replace(db, "postgres://postgres@", "postgres://eaimq_no_such_role@", 1), "eaimq_no_such_role"},
	} {
		r := w.runEnv([]string{store.EnvPath + "=" + c.url}, "consumer", "--claim", w.url, "--max-seconds", "3")
		if r.code != cli.ExitConfig || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: exit %d, want %d naming %q\n%s%s", c.name, r.code, cli.ExitConfig, c.want, r.stdout, r.stderr)
		}
		// dlq serve's unit does not restart it for that either.
		r = w.runEnv([]string{store.EnvPath + "=" + c.url}, "dlq", "replay", "-all")
		if r.code != cli.ExitConfig || !strings.Contains(r.stderr, c.want) {
			t.Errorf("dlq replay, %s: exit %d, want %d naming %q\n%s%s", c.name, r.code, cli.ExitConfig, c.want, r.stdout, r.stderr)
		}
	}
}

// pgTables counts the tables in the database url names.
func pgTables(t *testing.T, url string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
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
