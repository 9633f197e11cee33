package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/cli"
	"eaimq/internal/dlq"
	"eaimq/internal/dlqcli"
	"eaimq/internal/store"
	"eaimq/internal/store/sqlite"
	"eaimq/internal/topo"
)

type world struct {
	t       *testing.T
	vh      *brokertest.VHost
	partner *claimsys.Server
	url, db string
	hooks   dlq.Hooks // the engine's, for every run of w.dlq
}

func newWorld(t *testing.T) *world {
	vh := brokertest.New(t)
	vh.Topology(t)
	p := claimsys.New()
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return &world{t: t, vh: vh, partner: p, url: srv.URL, db: filepath.Join(t.TempDir(), "processed.db")}
}

// consume runs the real consumer binary for a few seconds.
func (w *world) consume(seconds string) {
	w.t.Helper()
	cmd := exec.Command(brokertest.Binary(w.t, "eaimq/consumer"), "--claim", w.url, "--max-seconds", seconds, "--log-level", "warn")
	cmd.Env = append(os.Environ(), broker.EnvURL+"="+w.vh.URL, store.EnvPath+"="+w.db)
	if out, err := cmd.CombinedOutput(); err != nil {
		w.t.Fatalf("consumer: %v\n%s", err, out)
	}
}

func (w *world) dlq(args ...string) (int, string, string) {
	w.t.Helper()
	var out, errb bytes.Buffer
	getenv := w.vh.Getenv(map[string]string{store.EnvPath: w.db})
	// run, with the test's hooks in the config it parsed.
	c, err := parseConfig(args, getenv, &out, &errb)
	if err == nil {
		c.dlq.Hooks = w.hooks
		err = execute(context.Background(), c, getenv, &out, &errb)
	}
	cli.Report(&errb, "dlq", err)
	return cli.Code(err), out.String(), errb.String()
}

func (w *world) rows() map[string]dlqcli.Row {
	w.t.Helper()
	code, out, errs := w.dlq("-json", "list")
	if code != 0 {
		w.t.Fatalf("list: %d %s", code, errs)
	}
	m := map[string]dlqcli.Row{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r dlqcli.Row
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			w.t.Fatalf("%q: %v", line, err)
		}
		m[r.MessageID] = r
	}
	return m
}

// mixedRun leaves two 422s and two BUSYs in claim.dead and delivers three.
func mixedRun(t *testing.T) *world {
	w := newWorld(t)
	w.vh.PublishClaims(t,
		brokertest.Claim("good-0", "C-0", "r.pdf"), brokertest.Claim("good-1", "C-1", "r.pdf"), brokertest.Claim("good-2", "C-2", "r.pdf"),
		brokertest.Claim("nodocs-0", "C-N0"), brokertest.Claim("nodocs-1", "C-N1"),
		brokertest.Claim("busy-0", "BUSY-0", "r.pdf"), brokertest.Claim("busy-1", "BUSY-1", "r.pdf"))
	w.consume("2")
	if n := w.vh.Depth(t, topo.DeadQueue); n != 4 {
		t.Fatalf("setup: claim.dead holds %d, want 4", n)
	}
	return w
}

func TestListShowsReasonsAndKeepsAll(t *testing.T) {
	w := mixedRun(t)
	rows := w.rows()
	if len(rows) != 4 {
		t.Fatalf("listed %d, want 4: %v", len(rows), rows)
	}
	for _, id := range []string{"nodocs-0", "nodocs-1"} {
		r := rows[id]
		if r.Reason != "rejected" || r.DeadReason != "rejected by the claim system" || !r.Recorded || r.Status != 422 || r.Attempts != 1 || r.FromQueue != topo.Queue || r.Broker != "rejected" || r.ClaimID == "" {
			t.Errorf("%s: %+v", id, r)
		}
	}
	for _, id := range []string{"busy-0", "busy-1"} {
		r := rows[id]
		if r.Reason != "failed-twice" || r.Status != 503 || r.Attempts != 2 || r.DeadReason != "transient failure again after 1 retry" {
			t.Errorf("%s: %+v", id, r)
		}
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 4 {
		t.Errorf("after list, claim.dead holds %d, want 4", n)
	}
	code, out, _ := w.dlq("list")
	if code != 0 || !brokertest.ContainsAll(out, "4 dead letter(s) listed", "busy-0", "failed-twice: transient failure again after 1 retry") {
		t.Errorf("table:\n%s", out)
	}
	code, out, _ = w.dlq("show", "busy-1")
	if code != 0 || !brokertest.ContainsAll(out, "message_id:    busy-1", "x-death", "status=503", "action=dead", "reason=failed-twice", `"claimId":"BUSY-1"`) {
		t.Errorf("show:\n%s", out)
	}
	if code, _, _ := w.dlq("-status", "422", "list"); code != 0 {
		t.Errorf("filter: %d", code)
	}
}

func TestReplayAfterPartnerFixed(t *testing.T) {
	w := mixedRun(t)
	ok := 201
	w.partner.Set(claimsys.Control{ForceStatus: &ok})
	code, out, errs := w.dlq("replay", "-reason", "transient") // the old word for failed-twice
	if code != 0 || !strings.Contains(out, "2 replayed") {
		t.Fatalf("replay: %d\n%s%s", code, out, errs)
	}
	if rows := w.rows(); len(rows) != 2 || rows["nodocs-0"].Reason != "rejected" {
		t.Fatalf("after replay, claim.dead: %v", rows)
	}
	w.consume("2")
	st := w.partner.Stats()
	for _, id := range []string{"busy-0", "busy-1"} {
		if st.Accepted[id] != 1 {
			t.Errorf("%s accepted %d times after replay", id, st.Accepted[id])
		}
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 2 {
		t.Errorf("claim.dead holds %d, want the two 422s", n)
	}
}

func TestReplaySkipsDelivered(t *testing.T) {
	w := mixedRun(t)
	// A dead copy of a claim that was delivered (say, a duplicate that was
	// dead-lettered by hand): replaying it would call the partner again.
	ch := w.vh.Channel(t)
	if err := ch.Publish("", topo.DeadQueue, false, false, amqp.Publishing{MessageId: "good-1", Body: brokertest.Claim("good-1", "C-1", "r.pdf"), DeliveryMode: 2}); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 5e9, "dead copy queued", func() bool { return w.vh.Depth(t, topo.DeadQueue) == 5 })
	code, out, _ := w.dlq("replay", "good-1")
	if code != 0 || !strings.Contains(out, "skipped good-1") || w.vh.Depth(t, topo.DeadQueue) != 5 {
		t.Fatalf("replay of a delivered claim: %d\n%s", code, out)
	}
	code, out, _ = w.dlq("-force", "replay", "good-1")
	if code != 0 || !strings.Contains(out, "replayed good-1") || w.vh.Depth(t, topo.DeadQueue) != 4 {
		t.Fatalf("-force: %d\n%s", code, out)
	}
}

func TestPurgeExactlyOne(t *testing.T) {
	w := mixedRun(t)
	if code, out, _ := w.dlq("purge", "nodocs-0"); code != cli.ExitUsage || !strings.Contains(out, "would archive nodocs-0") {
		t.Fatalf("purge without -yes: %d\n%s", code, out)
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 4 {
		t.Fatalf("a dry run deleted: %d left", n)
	}
	code, out, _ := w.dlq("-yes", "purge", "nodocs-0")
	if code != 0 || !strings.Contains(out, "archived nodocs-0") {
		t.Fatalf("purge: %d\n%s", code, out)
	}
	rows := w.rows()
	if _, still := rows["nodocs-0"]; still || len(rows) != 3 || w.vh.Depth(t, topo.ArchiveQueue) != 1 {
		t.Errorf("after purge: %v", rows)
	}
	// For good: the dry run says so, and the archive gets nothing.
	if code, out, _ := w.dlq("-no-archive", "purge", "nodocs-1"); code != cli.ExitUsage || !strings.Contains(out, "would delete nodocs-1") {
		t.Fatalf("purge -no-archive without -yes: %d\n%s", code, out)
	}
	if code, out, _ := w.dlq("-yes", "-no-archive", "purge", "nodocs-1"); code != 0 || !strings.Contains(out, "deleted nodocs-1") {
		t.Fatalf("purge -no-archive: %d\n%s", code, out)
	}
	if rows := w.rows(); len(rows) != 2 || w.vh.Depth(t, topo.ArchiveQueue) != 1 {
		t.Errorf("after purge -no-archive: %v", rows)
	}
}

// TestCrashBetweenConfirmAndAck: the replay dies after the broker confirmed
// the copies and before it acked the dead ones. Nothing is lost: each claim
// is in claim.in (the copy) and in claim.dead (the dead copy, returned by
// the broker); the consumer's dedup absorbs the pair.
func TestCrashBetweenConfirmAndAck(t *testing.T) {
	w := mixedRun(t)
	w.hooks.AfterConfirm = func() error { return errors.New("simulated crash") }
	code, _, _ := w.dlq("replay", "-all")
	if code == 0 {
		t.Fatal("the crash hook did not stop the replay")
	}
	if in, dead := w.vh.Depth(t, topo.Queue), w.vh.Depth(t, topo.DeadQueue); in != 4 || dead != 4 {
		t.Fatalf("after the crash: claim.in %d, claim.dead %d; want 4 and 4", in, dead)
	}
	w.hooks.AfterConfirm = nil
	ok := 201
	w.partner.Set(claimsys.Control{ForceStatus: &ok})
	w.consume("2") // the copies: delivered once each
	if code, out, _ := w.dlq("replay", "-all"); code != 0 || !strings.Contains(out, "4 skipped as delivered") {
		t.Fatalf("second replay: %d\n%s", code, out)
	}
	for _, id := range []string{"busy-0", "busy-1", "nodocs-0", "nodocs-1"} {
		if n := w.partner.Stats().Accepted[id]; n != 1 {
			t.Errorf("%s accepted %d times", id, n)
		}
	}
}

// TestBigDLQBoundedMemory lists 20,000 dead letters of 2 KiB each (40 MB of
// bodies) through the real binary and checks its peak RSS stays far below
// what holding them would take.
func TestBigDLQBoundedMemory(t *testing.T) {
	w := newWorld(t)
	const n = 20000
	pad := strings.Repeat("x", 2048)
	ch := w.vh.Channel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var dcs []*amqp.DeferredConfirmation
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirm("", topo.DeadQueue, false, false, amqp.Publishing{
			MessageId: fmt.Sprintf("big-%05d", i), Body: []byte(`{"guid":"x","pad":"` + pad + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		dc.Wait()
	}
	// -max-held 0: this is dlq's own memory over a walk of them all.
	cmd := exec.Command(brokertest.Binary(t, "eaimq/dlq"), "-json", "-max-held", "0", "list")
	cmd.Env = append(os.Environ(), broker.EnvURL+"="+w.vh.URL, store.EnvPath+"="+w.db)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The kernel's peak RSS of the process since its exec (VmHWM), sampled
	// until it exits. (wait4's ru_maxrss would also count the test binary
	// itself, which the child shares memory with between fork and exec.)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var rss int64
	for done := false; !done; {
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("dlq list: %v", err)
			}
			done = true
		case <-time.After(10 * time.Millisecond):
			rss = max(rss, peakRSS(cmd.Process.Pid))
		}
	}
	if lines := strings.Count(out.String(), "\n"); lines != n {
		t.Errorf("listed %d, want %d", lines, n)
	}
	rss /= 1024 // KiB → MiB
	t.Logf("peak RSS listing %d dead letters (%d MiB of bodies): %d MiB", n, n*2/1024, rss)
	if rss > 30 {
		t.Errorf("peak RSS %d MiB: the walk holds messages", rss)
	}
	if d := w.vh.Depth(t, topo.DeadQueue); d != n {
		t.Errorf("claim.dead holds %d after list, want %d", d, n)
	}
}

func TestErrors(t *testing.T) {
	vh := brokertest.New(t) // no topology
	getenv := vh.Getenv(map[string]string{store.EnvPath: filepath.Join(t.TempDir(), "none.db")})
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"list"}, getenv, &out, &errb)
	if cli.Code(err) != cli.ExitConfig || !strings.Contains(err.Error(), "run topology first") {
		t.Errorf("missing claim.dead: %d %v", cli.Code(err), err)
	}
	if !strings.Contains(errb.String(), "warning") {
		t.Errorf("missing store: no warning: %s", errb.String())
	}
	err = run(context.Background(), []string{"replay", "-all"}, getenv, &out, &errb)
	if cli.Code(err) != cli.ExitIOErr {
		t.Errorf("replay without a store: %d %v", cli.Code(err), err)
	}
	for _, args := range [][]string{{}, {"frobnicate"}, {"show"}, {"replay"}, {"purge"}, {"list", "x"}, {"-reason", "bad", "list"}} {
		if err := run(context.Background(), args, getenv, &out, &errb); cli.Code(err) != cli.ExitUsage {
			t.Errorf("%q: exit %d, want 2", args, cli.Code(err))
		}
	}
}

// peakRSS is VmHWM of pid in KiB, or 0 once it is gone.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb
		}
	}
	return 0
}

// dlqWith runs dlq with EAI_MQ_DB set to db.
func (w *world) dlqWith(db string, args ...string) (int, string, string) {
	w.t.Helper()
	saved := w.db
	w.db = db
	defer func() { w.db = saved }()
	return w.dlq(args...)
}

// deadLetter puts messages straight into claim.dead, confirmed.
func (w *world) deadLetter(msgs ...amqp.Publishing) { w.t.Helper(); w.vh.DeadLetter(w.t, msgs...) }

// TestReasonIsRecorded: a partner answering 200 (a proxy, a health page)
// gets claims dead-lettered as unexpected-status. dlq shows the reason the
// consumer recorded; from the status alone it once called them transient,
// and a 200 is easily taken for delivered.
func TestReasonIsRecorded(t *testing.T) {
	w := newWorld(t)
	two := 200
	w.partner.Set(claimsys.Control{ForceStatus: &two})
	w.vh.PublishClaims(t, brokertest.Claim("ok200-0", "C-200-0", "r.pdf"), brokertest.Claim("ok200-1", "C-200-1", "r.pdf"))
	w.consume("2")
	if n := w.vh.Depth(t, topo.DeadQueue); n != 2 {
		t.Fatalf("setup: claim.dead holds %d, want the two 200s", n)
	}
	rows := w.rows()
	for _, id := range []string{"ok200-0", "ok200-1"} {
		r := rows[id]
		if r.Reason != "unexpected-status" || r.DeadReason != "unexpected 200: not a creation" || r.Status != 200 || !r.Recorded {
			t.Errorf("%s: %+v, want unexpected-status as recorded", id, r)
		}
	}
	for _, c := range []struct {
		reason string
		want   int
	}{{"delivered", 0}, {"unexpected-status", 2}, {"rejected", 0}, {"failed-twice", 0}, {"unknown", 0}} {
		code, out, errs := w.dlq("-json", "-reason", c.reason, "list")
		if got := strings.Count(out, "\n"); code != 0 || got != c.want {
			t.Errorf("-reason %s: exit %d, %d listed, want %d\n%s%s", c.reason, code, got, c.want, out, errs)
		}
	}
	code, out, _ := w.dlq("list")
	if code != 0 || !strings.Contains(out, "unexpected-status: unexpected 200: not a creation") {
		t.Errorf("table:\n%s", out)
	}
}

// TestNoStoreRefuses: a mistyped EAI_MQ_DB makes every dead letter look
// unknown; purge and replay must not act on that.
func TestNoStoreRefuses(t *testing.T) {
	w := mixedRun(t)
	typo := filepath.Join(t.TempDir(), "procesed.db")
	for _, args := range [][]string{
		{"-reason", "unknown", "-yes", "purge", "-all"},
		{"-yes", "purge", "nodocs-0"},
		{"replay", "-all"},
		{"-force", "replay", "-all"},
		{"-reason", "unknown", "replay"},
	} {
		code, out, errs := w.dlqWith(typo, args...)
		if code != cli.ExitIOErr || !strings.Contains(errs, "-no-store") || acted(out) {
			t.Errorf("%q with a missing store: exit %d, want 74\n%s%s", args, code, out, errs)
		}
		if n := w.vh.Depth(t, topo.DeadQueue); n != 4 {
			t.Fatalf("%q with a missing store: claim.dead holds %d, want 4", args, n)
		}
	}
	// list goes on, and says so.
	if code, out, errs := w.dlqWith(typo, "list"); code != 0 || !strings.Contains(errs, "warning") || !strings.Contains(out, "unknown (no store read)") {
		t.Errorf("list without a store: %d\n%s%s", code, out, errs)
	}
	// Saying there is none is a choice the user can make.
	if code, _, errs := w.dlqWith(typo, "-no-store", "-reason", "rejected", "list"); code != cli.ExitUsage {
		t.Errorf("-no-store -reason rejected: %d %s", code, errs)
	}
	if code, out, errs := w.dlqWith(typo, "-no-store", "-yes", "purge", "nodocs-0"); code != 0 || !strings.Contains(out, "purged 1") {
		t.Errorf("-no-store purge: %d\n%s%s", code, out, errs)
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 3 {
		t.Errorf("claim.dead holds %d, want 3", n)
	}
}

// TestStoreReadError: a store that cannot be read is exit 74, never a
// quiet "unknown" for every dead letter.
func TestStoreReadError(t *testing.T) {
	w := mixedRun(t)
	dir := t.TempDir()
	notSQLite := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notSQLite, []byte("not a database, just notes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// An SQLite file at the current schema version with no tables: it
	// opens, and every lookup fails.
	empty := filepath.Join(dir, "empty.db")
	db, err := sql.Open("sqlite3", empty)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version=%d", sqlite.SchemaVersion)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, c := range []struct {
		db   string
		args []string
		want int
	}{
		{notSQLite, []string{"-reason", "unknown", "-yes", "purge", "-all"}, cli.ExitIOErr},
		{notSQLite, []string{"replay", "-all"}, cli.ExitIOErr},
		{empty, []string{"-reason", "unknown", "-yes", "purge", "-all"}, cli.ExitIOErr},
		{empty, []string{"-yes", "purge", "-all"}, cli.ExitIOErr},
		{empty, []string{"replay", "-all"}, cli.ExitIOErr},
		{empty, []string{"list"}, cli.ExitIOErr},
		{empty, []string{"show", "busy-0"}, cli.ExitIOErr},
	} {
		code, out, errs := w.dlqWith(c.db, c.args...)
		if code != c.want || acted(out) {
			t.Errorf("%s %q: exit %d, want %d\n%s%s", filepath.Base(c.db), c.args, code, c.want, out, errs)
		}
		if n := w.vh.Depth(t, topo.DeadQueue); n != 4 {
			t.Fatalf("%s %q: claim.dead holds %d, want 4", filepath.Base(c.db), c.args, n)
		}
	}
	if _, _, errs := w.dlqWith(empty, "list"); !strings.Contains(errs, "no such table") {
		t.Errorf("the store's error is not shown: %s", errs)
	}
}

// acted says whether dlq's output tells of a dead letter deleted or replayed.
func acted(out string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "deleted ") || strings.HasPrefix(line, "replayed ") {
			return true
		}
	}
	return false
}

// TestEscapes: what a message holds reaches a terminal only escaped.
func TestEscapes(t *testing.T) {
	w := newWorld(t)
	evil := "\x1b[2J\x07\x1b]0;pwned\x07\u009b31m\u202e\r"
	body := []byte(`{"guid":"evil-guid","claimId":"C-` + evil + `","docs":[],"note":"` + evil + "\n\tline two\xff" + `"}`)
	huge := `{"guid":"huge","claimId":"` + strings.Repeat("H", 1<<20) + `","docs":[]}`
	w.deadLetter(
		amqp.Publishing{MessageId: "evil-" + evil, Body: body, AppId: evil, DeliveryMode: 2,
			Headers: amqp.Table{"x-note": evil, "x-nested": amqp.Table{"k" + evil: []any{"a", evil, int64(3)}}}},
		amqp.Publishing{MessageId: "huge", Body: []byte(huge), DeliveryMode: 2},
	)
	id := "evil-" + evil
	for _, args := range [][]string{{"list"}, {"-json", "list"}, {"show", id}, {"-json", "show", id}, {"show", "huge"}, {"-no-store", "replay", "nope" + evil}} {
		code, out, errs := w.dlq(args...)
		if slices.Contains(args, "replay") {
			if code != cli.ExitFailure {
				t.Errorf("replay of an unknown id: %d", code)
			}
		} else if code != 0 {
			t.Errorf("%q: exit %d\n%s", args, code, errs)
		}
		for _, bad := range []string{"\x1b", "\x07", "\r", "\u009b", "\u202e", "\xff"} {
			if strings.Contains(out, bad) || strings.Contains(errs, bad) {
				t.Errorf("%q prints %q raw", args[:len(args)-1], bad)
			}
		}
		if args[0] != "-json" && len(out) > 200<<10 {
			t.Errorf("%q prints %d bytes: long fields are not clipped", args[:len(args)-1], len(out))
		}
	}
	code, out, _ := w.dlq("show", id)
	if code != 0 || !brokertest.ContainsAll(out, `\x1b[2J\x07`, `\u202e`, `\xff`, "\n\tline two", "x-nested:\n    k", "  x-note: ") || strings.Contains(out, "map[") {
		t.Errorf("show:\n%s", out)
	}
	_, out, _ = w.dlq("list")
	for _, line := range strings.Split(out, "\n") {
		if len(line) > 400 {
			t.Errorf("a table line of %d bytes", len(line))
		}
	}
}

// TestBadInput: values that select nothing, or everything, by accident.
func TestBadInput(t *testing.T) {
	w := mixedRun(t)
	for _, args := range [][]string{
		{"-limit", "-1", "list"}, {"-limit", "-1", "replay", "-all"}, {"-limit", "-1", "-yes", "purge", "-all"},
		{"show", ""}, {"-yes", "purge", ""}, {"replay", ""}, {"-yes", "purge", "nodocs-0", ""},
		{"-status", "42", "list"}, {"-max-replays", "0", "replay", "-all"}, {"-max-replays", "1001", "replay", "-all"},
		{"-yes", "list"}, {"-force", "purge", "-all", "-yes"}, {"-json", "replay", "-all"},
	} {
		if code, out, errs := w.dlq(args...); code != cli.ExitUsage {
			t.Errorf("%q: exit %d, want 2\n%s%s", args, code, out, errs)
		}
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 4 {
		t.Errorf("claim.dead holds %d, want 4", n)
	}
}

// TestUnknownIDs: the manual says exit 1 for a named ID that is not there.
func TestUnknownIDs(t *testing.T) {
	w := mixedRun(t)
	for _, args := range [][]string{{"replay", "nope"}, {"-yes", "purge", "nope"}, {"show", "nope"}} {
		if code, out, errs := w.dlq(args...); code != cli.ExitFailure || !strings.Contains(errs, `"nope"`) {
			t.Errorf("%q: exit %d, want 1\n%s%s", args, code, out, errs)
		}
	}
	// The IDs that are there are acted on; the exit says one was not.
	code, out, _ := w.dlq("-yes", "purge", "nodocs-0", "nope")
	if code != cli.ExitFailure || !strings.Contains(out, "archived nodocs-0") {
		t.Errorf("purge of one known and one unknown ID: %d\n%s", code, out)
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 3 {
		t.Errorf("claim.dead holds %d, want 3", n)
	}
}

// TestFlagsAnywhere: flags after the command and after IDs are flags;
// after -- everything is an ID.
func TestFlagsAnywhere(t *testing.T) {
	w := mixedRun(t)
	w.deadLetter(amqp.Publishing{MessageId: "-odd", Body: brokertest.Claim("-odd", "C-odd", "r.pdf"), DeliveryMode: 2})
	if code, out, errs := w.dlq("show", "--", "-odd"); code != 0 || !strings.Contains(out, "message_id:    -odd") {
		t.Errorf("show -- -odd: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := w.dlq("purge", "nodocs-0", "-yes"); code != 0 || !strings.Contains(out, "archived nodocs-0") {
		t.Errorf("purge X -yes: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := w.dlq("list", "-json"); code != 0 || strings.Count(out, "\n") != 4 || !strings.HasPrefix(out, "{") {
		t.Errorf("list -json: %d\n%s%s", code, out, errs)
	}
	// A claim replayed too often is refused unless -force, given after the ID.
	w.deadLetter(amqp.Publishing{MessageId: "again", Body: brokertest.Claim("again", "C-again", "r.pdf"), DeliveryMode: 2,
		Headers: amqp.Table{"x-eaimq-replays": int64(5)}})
	code, out, errs := w.dlq("replay", "again")
	if code != cli.ExitFailure || !strings.Contains(errs, "replayed 5 times already") || w.vh.Depth(t, topo.Queue) != 0 {
		t.Errorf("replay over -max-replays: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := w.dlq("replay", "again", "-max-replays", "6"); code != 0 || !strings.Contains(out, "replayed again") {
		t.Errorf("replay X -max-replays 6: %d\n%s%s", code, out, errs)
	}
	d := w.vh.Drain(t, topo.Queue)
	if len(d) != 1 || dlq.Replays(d[0].Headers) != 6 {
		t.Fatalf("claim.in after the replay: %d messages", len(d))
	}
	w.deadLetter(amqp.Publishing{MessageId: d[0].MessageId, Body: d[0].Body, Headers: d[0].Headers, DeliveryMode: 2})
	if code, out, errs := w.dlq("replay", "again", "-force"); code != 0 || !strings.Contains(out, "replayed again") {
		t.Errorf("replay X -force: %d\n%s%s", code, out, errs)
	}
}

// TestShowJSON: -json show is one JSON object.
func TestShowJSON(t *testing.T) {
	w := mixedRun(t)
	code, out, errs := w.dlq("-json", "show", "busy-1")
	if code != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("-json show: %d\n%s%s", code, out, errs)
	}
	var s struct {
		MessageID string              `json:"message_id"`
		Reason    string              `json:"reason"`
		Headers   map[string]any      `json:"headers"`
		History   []dlqcli.AttemptRow `json:"history"`
		Body      string              `json:"body"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if s.MessageID != "busy-1" || s.Reason != "failed-twice" || s.Headers["x-death"] == nil || len(s.History) != 2 || !strings.Contains(s.Body, `"BUSY-1"`) {
		t.Errorf("-json show: %+v", s)
	}
}

// TestLimitSaysMore: -limit leaves some out, and says so.
func TestLimitSaysMore(t *testing.T) {
	w := mixedRun(t)
	code, out, _ := w.dlq("-limit", "3", "list")
	if code != 0 || !strings.Contains(out, "1 more in claim.dead not looked at (-limit 3)") {
		t.Errorf("-limit 3 list:\n%s", out)
	}
	code, out, errs := w.dlq("-limit", "3", "-json", "list")
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(errs, "1 more dead letter(s)") {
		t.Errorf("-limit 3 -json list:\n%s%s", out, errs)
	}
	if _, out, _ := w.dlq("-limit", "4", "list"); strings.Contains(out, "more in claim.dead") {
		t.Errorf("-limit 4 of 4 says more:\n%s", out)
	}
}

// TestInterruptDuringConnect: a peer that accepts and never answers holds
// the AMQP handshake; SIGINT ends dlq within a second, with 130.
func TestInterruptDuringConnect(t *testing.T) {
	url, accepted := brokertest.SilentBroker(t)
	cmd := exec.Command(brokertest.Binary(t, "eaimq/dlq"), "-no-store", "list")
	cmd.Env = append(os.Environ(), broker.EnvURL+"="+url, store.EnvPath+"="+filepath.Join(t.TempDir(), "none.db"))
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if took := brokertest.InterruptWhileConnecting(t, cmd, accepted); took > time.Second {
		t.Errorf("exited %s after SIGINT, want within 1s", took)
	}
	if code := cmd.ProcessState.ExitCode(); code != cli.ExitInterrupted {
		t.Errorf("exit %d, want 130:\n%s", code, errb.String())
	}
}
