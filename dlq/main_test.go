package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/cli"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

type world struct {
	t       *testing.T
	vh      *brokertest.VHost
	partner *claimsys.Server
	url, db string
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
	err := run(context.Background(), args, w.vh.Getenv(map[string]string{store.EnvPath: w.db}), &out, &errb)
	cli.Report(&errb, "dlq", err)
	return cli.Code(err), out.String(), errb.String()
}

func (w *world) rows() map[string]row {
	w.t.Helper()
	code, out, errs := w.dlq("-json", "list")
	if code != 0 {
		w.t.Fatalf("list: %d %s", code, errs)
	}
	m := map[string]row{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r row
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
	if code, out, _ := w.dlq("purge", "nodocs-0"); code != cli.ExitUsage || !strings.Contains(out, "would delete nodocs-0") {
		t.Fatalf("purge without -yes: %d\n%s", code, out)
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 4 {
		t.Fatalf("a dry run deleted: %d left", n)
	}
	code, out, _ := w.dlq("-yes", "purge", "nodocs-0")
	if code != 0 || !strings.Contains(out, "deleted nodocs-0") {
		t.Fatalf("purge: %d\n%s", code, out)
	}
	rows := w.rows()
	if _, still := rows["nodocs-0"]; still || len(rows) != 3 {
		t.Errorf("after purge: %v", rows)
	}
}

// TestCrashBetweenConfirmAndAck: the replay dies after the broker confirmed
// the copies and before it acked the dead ones. Nothing is lost: each claim
// is in claim.in (the copy) and in claim.dead (the dead copy, returned by
// the broker); the consumer's dedup absorbs the pair.
func TestCrashBetweenConfirmAndAck(t *testing.T) {
	w := mixedRun(t)
	afterConfirm = func() error { return errors.New("simulated crash") }
	t.Cleanup(func() { afterConfirm = nil })
	code, _, _ := w.dlq("replay", "-all")
	if code == 0 {
		t.Fatal("the crash hook did not stop the replay")
	}
	if in, dead := w.vh.Depth(t, topo.Queue), w.vh.Depth(t, topo.DeadQueue); in != 4 || dead != 4 {
		t.Fatalf("after the crash: claim.in %d, claim.dead %d; want 4 and 4", in, dead)
	}
	afterConfirm = nil
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
	cmd := exec.Command(brokertest.Binary(t, "eaimq/dlq"), "-json", "list")
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
