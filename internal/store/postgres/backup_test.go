package postgres

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"eaimq/internal/audit"
	"eaimq/internal/claim"
	"eaimq/internal/pgtest"
)

// TestPostgresBackupRestore runs docs/operations.md's PostgreSQL backup
// and its two restores, as the page writes them (its sh blocks, in bash),
// against the real server: the dump takes the store and dlq's audit trail
// (eaimq_audit); restored into a new database, both are back; restored
// into the database still there, the records are the backup's and the
// audit trail keeps the entries written after the backup.
func TestPostgresBackupRestore(t *testing.T) {
	blocks := pageBlocks(t)
	if len(blocks) != 3 {
		t.Fatalf("docs/operations.md's PostgreSQL backup has %d sh blocks, want 3 (the dump, the restore into a new database, into the one there):\n%q", len(blocks), blocks)
	}
	dir := t.TempDir()
	src := pgtest.New(t)
	deliver(t, src, "early")
	appendEntry(t, src, "before-backup")

	sh(t, dir, src, blocks[0])
	dumps, _ := filepath.Glob(filepath.Join(dir, "eaimq-*.dump"))
	if len(dumps) != 1 {
		t.Fatalf("the page's pg_dump wrote %v, want one eaimq-DATE.dump", dumps)
	}
	if err := os.Rename(dumps[0], filepath.Join(dir, "eaimq-DATE.dump")); err != nil {
		t.Fatal(err)
	}
	deliver(t, src, "late")
	appendEntry(t, src, "after-backup")

	// The database lost: everything into a new one.
	dst := pgtest.New(t)
	sh(t, dir, dst, blocks[1])
	checkRestored(t, dst, []string{"before-backup"})

	// The database there: everything but the audit trail.
	sh(t, dir, src, blocks[2])
	checkRestored(t, src, []string{"before-backup", "after-backup"})
}

// pageBlocks are the sh blocks of the page's PostgreSQL backup section.
func pageBlocks(t *testing.T) []string {
	t.Helper()
	page, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(page), "## Back up and restore the store")
	_, section, _ = strings.Cut(section, "### PostgreSQL")
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// sh runs a block of the page in bash, in dir, with EAI_MQ_DB set to db.
func sh(t *testing.T, dir, db, block string) {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "EAI_MQ_DB="+db)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", block, err, out)
	}
}

func deliver(t *testing.T, loc, id string) {
	t.Helper()
	s, err := Open(loc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Begin(ctx, id, claim.Copy{ClaimID: "C-" + id, Fresh: true}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, id, claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil {
		t.Fatal(err)
	}
}

func appendEntry(t *testing.T, loc, id string) {
	t.Helper()
	trail, err := audit.Open(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer trail.Close()
	e := audit.Entry{At: time.Now(), Who: "ops", Via: "dlq replay", Action: "replay", Target: id, IDs: []string{id}, Result: audit.Done}
	if err := trail.Append(ctx, e); err != nil {
		t.Fatal(err)
	}
}

// checkRestored: the store at loc is the backup's (early delivered, late
// unknown: it came after), opened without creating anything, and its
// audit trail reads trail.
func checkRestored(t *testing.T, loc string, trail []string) {
	t.Helper()
	s, err := Open(loc, Options{NoCreate: true})
	if err != nil {
		t.Fatalf("the restored store: %v", err)
	}
	defer s.Close()
	if rec, found, err := s.Get(ctx, "early"); err != nil || !found || rec.State != claim.StateDone {
		t.Errorf("early, delivered before the backup: %+v %v %v, want done", rec, found, err)
	}
	if _, found, err := s.Get(ctx, "late"); err != nil || found {
		t.Errorf("late, delivered after the backup: found %v %v, want the backup's state (none)", found, err)
	}
	tr, err := audit.Open(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var got []string
	if err := tr.Entries(ctx, "", func(e audit.Entry) error { got = append(got, e.IDs...); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, trail) {
		t.Errorf("the audit trail after the restore reads %v, want %v", got, trail)
	}
}
