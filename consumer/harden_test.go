package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/claim"
	"eaimq/internal/claimsys"
	"eaimq/internal/cli"
	"eaimq/internal/relay"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

func force(status int) claimsys.Control { return claimsys.Control{ForceStatus: &status} }

func (h *harness) record(id string) claim.Record {
	h.t.Helper()
	st, err := store.Open(h.db, store.Options{ReadOnly: true})
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	rec, _, err := st.Get(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return rec
}

// TestOnly201IsDelivered: a 200 (a proxy, a health page) is never recorded
// as delivered; it is dead-lettered with its own reason, and a republished
// copy is tried again rather than acked as a duplicate. --accept-status
// widens the set on purpose.
func TestOnly201IsDelivered(t *testing.T) {
	h := newHarness(t)
	h.partner.Set(force(200))
	h.vh.PublishClaims(t, brokertest.Claim("ok200-1", "C-1", "r.pdf"))
	c := h.runUntil("the 200 dead-lettered", func() bool { return h.vh.Depth(t, topo.DeadQueue) == 1 })
	rec := h.record("ok200-1")
	if rec.Delivered() || rec.Outcome != claim.OutUnexpected || rec.DeadReason != "unexpected 200: not a creation" {
		t.Fatalf("a 200 was recorded as %+v", rec)
	}
	if !brokertest.ContainsAll(c.stdout.String(), "0 delivered", "1 unexpected status") {
		t.Errorf("summary: %s", c.stdout.String())
	}
	if !strings.Contains(c.stderr.String(), "level=WARN") || !strings.Contains(c.stderr.String(), "reason=unexpected-status") {
		t.Errorf("the dead letter was not logged at WARN with its reason:\n%s", c.stderr.String())
	}
	// Published again: tried again (not a duplicate), and with the status
	// widened it is delivered.
	h.vh.PublishClaims(t, brokertest.Claim("ok200-1", "C-1", "r.pdf"))
	h.runUntil("delivered with 200 accepted", func() bool { return h.drained() && h.calls("ok200-1") == 2 }, "--accept-status", "201,200")
	if rec := h.record("ok200-1"); !rec.Delivered() {
		t.Fatalf("with --accept-status 201,200: %+v", rec)
	}
}

// TestDeadQueueDeletedMidRun: claim.dead deleted by hand while the
// consumer runs. A 422 must not be rejected into nothing: the consumer
// stops with 78, the claim stays in claim.in; after topology, the next run
// dead-letters it without calling the partner again.
func TestDeadQueueDeletedMidRun(t *testing.T) {
	h := newHarness(t)
	h.vh.PublishClaims(t, brokertest.Claim("first-ok", "C-0", "r.pdf"))
	c := h.start("--max-seconds", "60")
	brokertest.Eventually(t, 30*time.Second, "the first claim delivered", func() bool { return h.drained() && h.calls("first-ok") == 1 })
	ch := h.vh.Channel(t)
	if _, err := ch.QueueDelete(topo.DeadQueue, false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.vh.Queues(t)[topo.DeadQueue]; ok {
		t.Fatal("claim.dead still exists")
	}
	h.vh.PublishClaims(t, brokertest.Claim("nodocs-x", "C-X"))
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the consumer went on with no dead-letter route")
	}
	if c.code != cli.ExitConfig || !strings.Contains(c.stderr.String(), "run topology") {
		t.Fatalf("exit %d, want 78 naming topology:\n%s", c.code, c.stderr.String())
	}
	if q := h.vh.Queues(t)[topo.Queue]; q.Messages != 1 {
		t.Fatalf("the rejected claim is not back in claim.in: %+v", q)
	}
	// At start, the missing route is refused too.
	var out, errb bytes.Buffer
	err := run(context.Background(), context.Background(), []string{"--claim", h.url, "--max-seconds", "1"}, h.getenv(), &out, &errb)
	if cli.Code(err) != cli.ExitConfig || !strings.Contains(err.Error(), "claim.dead") || out.Len() != 0 {
		t.Fatalf("start without claim.dead: exit %d %v, stdout %q", cli.Code(err), err, out.String())
	}
	h.vh.Topology(t)
	h.runUntil("dead-lettered after topology", func() bool { return h.drained() && h.vh.Depth(t, topo.DeadQueue) == 1 })
	if n := h.calls("nodocs-x"); n != 1 {
		t.Errorf("the 422 claim was called %d times, want 1 (its decision was on record)", n)
	}
}

// TestLostRejectIsNotCalledAgain: the connection goes between the record
// of a dead-letter decision and the reject. The redelivered copy meets the
// decision and is rejected again without a call: a 422 claim is called
// once, a BUSY claim twice, never three times.
func TestLostRejectIsNotCalledAgain(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	closed := map[string]bool{}
	var lost atomic.Int32
	h.hooks.BeforeAct = func(d amqp.Delivery, out claim.Outcome) {
		if out.Action != claim.DeadLetter {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if closed[d.MessageId] {
			return
		}
		closed[d.MessageId] = true
		// The fault: the channel dies before the reject goes out.
		if ch := relay.ChannelOf(d); ch != nil {
			ch.Close()
			lost.Add(1)
		}
	}
	h.vh.PublishClaims(t, brokertest.Claim("nd-1", "C-1"), brokertest.Claim("bz-1", "BUSY-1", "r.pdf"))
	c := h.runUntil("both dead-lettered", func() bool { return h.drained() && h.vh.Depth(t, topo.DeadQueue) == 2 })
	if lost.Load() != 2 {
		t.Fatalf("the fault happened %d times, want 2", lost.Load())
	}
	if n := h.calls("nd-1"); n != 1 {
		t.Errorf("the 422 claim was called %d times, want 1", n)
	}
	if n := h.calls("bz-1"); n != 2 {
		t.Errorf("the BUSY claim was called %d times, want 2", n)
	}
	if !strings.Contains(c.stderr.String(), "rejected again without a call") {
		t.Errorf("log:\n%s", c.stderr.String())
	}
}

// TestAnswerInHandIsRecordedOnForcedExit: a second signal arrives after
// the partner answered 201 and before the record. The answer is recorded
// anyway, so the claim's next copy is a duplicate, not a second call.
func TestAnswerInHandIsRecordedOnForcedExit(t *testing.T) {
	h := newHarness(t)
	h.vh.PublishClaims(t, brokertest.Claim("inhand-1", "C-1", "r.pdf"))
	var c *consumer
	var fired atomic.Bool
	started := make(chan struct{})
	h.hooks.AfterAnswer = func(out claim.Outcome) {
		if out == claim.OutDelivered && fired.CompareAndSwap(false, true) {
			<-started
			c.stop()
			c.kill() // the second signal, with the 201 in hand
		}
	}
	c = h.start("--max-seconds", "60")
	close(started)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatal("no forced exit")
	}
	if !fired.Load() || c.code != cli.ExitInterrupted {
		t.Fatalf("fired %v, exit %d", fired.Load(), c.code)
	}
	if rec := h.record("inhand-1"); !rec.Delivered() {
		t.Fatalf("the 201 in hand was thrown away: %+v", rec)
	}
	h.runUntil("the copy acked as a duplicate", h.drained)
	if n := h.calls("inhand-1"); n != 1 {
		t.Errorf("called %d times, want 1", n)
	}
}

// TestWaitingCopyDoesNotCallAfterDeadline: two copies of a BUSY claim; the
// second waits behind the first's call, which outlives --max-seconds. When
// the first fails, the second must not start a call after the deadline.
func TestWaitingCopyDoesNotCallAfterDeadline(t *testing.T) {
	h := newHarness(t)
	h.partner.Set(claimsysDelay(1500))
	busy := brokertest.Claim("wait-1", "BUSY-1", "r.pdf")
	h.vh.PublishClaims(t, busy, busy)
	var out, errb bytes.Buffer
	ctx := context.Background()
	start := time.Now()
	if err := run(ctx, ctx, []string{"--claim", h.url, "--max-seconds", "0.5"}, h.getenv(), &out, &errb); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if n := h.calls("wait-1"); n != 1 {
		t.Errorf("%d calls in a run of 0.5 s whose first call took 1.5 s, want 1 (took %s)", n, took)
	}
}

// TestUnsendable: a message_id or content type that cannot be an HTTP
// header value is dead-lettered at once with its own reason: no call, no
// retry burned.
func TestUnsendable(t *testing.T) {
	h := newHarness(t)
	h.vh.Publish(t,
		amqp.Publishing{MessageId: "nl\nid", Body: brokertest.Claim("x1", "C-1", "r.pdf")},
		amqp.Publishing{MessageId: "bel\aid", Body: brokertest.Claim("x2", "C-2", "r.pdf")},
		amqp.Publishing{MessageId: "ct-1", ContentType: "application/json\r\nX-Evil: 1", Body: brokertest.Claim("ct-1", "C-3", "r.pdf")},
	)
	c := h.runUntil("three dead-lettered", func() bool { return h.drained() && h.vh.Depth(t, topo.DeadQueue) == 3 })
	if n := h.totalCalls(); n != 0 {
		t.Errorf("the partner was called %d times", n)
	}
	if rec := h.record("ct-1"); rec.Outcome != claim.OutUnsendable || rec.Attempts != 0 || !strings.Contains(rec.DeadReason, "content_type") {
		t.Errorf("record: %+v", rec)
	}
	if !strings.Contains(c.stdout.String(), "3 unsendable") {
		t.Errorf("summary: %s", c.stdout.String())
	}
}

// TestGuidIsExact: without a message_id the consumer keys on the body's
// exact-case "guid", byte-exact (the rule publish applies): "GUID" is not
// a guid, and two guids that differ only in invalid bytes are two claims.
func TestGuidIsExact(t *testing.T) {
	h := newHarness(t)
	h.vh.Publish(t,
		amqp.Publishing{Body: []byte(`{"GUID":"upper-1","claimId":"C-U","docs":["r.pdf"]}`)},
		amqp.Publishing{Body: []byte(`{"guid":"exact-1","claimId":"C-E","docs":["r.pdf"]}`)},
	)
	h.runUntil("settled", func() bool { return h.drained() && h.totalCalls() == 1 && h.vh.Depth(t, topo.DeadQueue) == 1 })
	if n := h.calls("exact-1"); n != 1 {
		t.Errorf("exact guid: %d calls", n)
	}
	if rec := h.record("upper-1"); rec.State != "" {
		t.Errorf("GUID was taken as the guid: %+v", rec)
	}
}

// TestSymlinkedStore: EAI_MQ_DB as a symbolic link works end to end.
func TestSymlinkedStore(t *testing.T) {
	h := newHarness(t)
	real := filepath.Join(t.TempDir(), "real.db")
	link := filepath.Join(t.TempDir(), "link.db")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	h.db = link
	h.vh.PublishClaims(t, brokertest.Claims("sym", "C-sym", 3, true)...)
	c := h.runUntil("delivered through a symlinked store", func() bool { return h.drained() && h.totalCalls() == 3 })
	if c.code != 0 || !strings.Contains(c.stdout.String(), "3 delivered") {
		t.Fatalf("exit %d: %s %s", c.code, c.stdout.String(), c.stderr.String())
	}
}

// TestBadFlags: every numeric flag has a range; a bad value is a usage
// error (2) whose message names the flag, and nothing is consumed. A store
// path that is not a file is a setting to fix (78, which the unit does not
// restart).
func TestBadFlags(t *testing.T) {
	vh := brokertest.New(t)
	dir := t.TempDir()
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		code int
		want string
	}{
		{[]string{"--claim", "http://x", "--max-seconds", "1e10"}, nil, 2, "--max-seconds"},
		{[]string{"--claim", "http://x", "--max-seconds", "inf"}, nil, 2, "--max-seconds"},
		{[]string{"--claim", "http://x", "--max-seconds", "NaN"}, nil, 2, "--max-seconds"},
		{[]string{"--claim", "http://x", "--max-seconds", "-1"}, nil, 2, "--max-seconds"},
		{[]string{"--claim", "http://127.0.0.1:99999", "--max-seconds", "1"}, nil, 2, "port 99999"},
		{[]string{"--claim", "http://u:S3cretpw@127.0.0.1:99999", "--max-seconds", "1"}, nil, 2, "port 99999"},
		{[]string{"--claim", "http://x", "--sync", "bogus"}, nil, 2, "--sync"},
		{[]string{"--claim", "http://x", "--http-timeout", "2562047h"}, nil, 2, "--http-timeout"},
		{[]string{"--claim", "http://x", "--http-timeout", "0s"}, nil, 2, "--http-timeout"},
		{[]string{"--claim", "http://x", "--accept-status", "301"}, nil, 2, "--accept-status"},
		{[]string{"--claim", "http://x", "--prefetch", "70000"}, nil, 2, "--prefetch"},
		{[]string{"--claim", "http://x", "--max-seconds", "1"}, map[string]string{store.EnvPath: "/dev/null"}, 78, "not a regular file"},
		{[]string{"--claim", "http://x", "--max-seconds", "1"}, map[string]string{store.EnvPath: dir}, 78, "not a regular file"},
	} {
		env := map[string]string{store.EnvPath: filepath.Join(dir, "p.db")}
		for k, v := range tc.env {
			env[k] = v
		}
		var out, errb bytes.Buffer
		err := run(ctx, ctx, tc.args, vh.Getenv(env), &out, &errb)
		cli.Report(&errb, "consumer", err)
		first, _, _ := strings.Cut(errb.String(), "\n")
		if cli.Code(err) != tc.code || !strings.Contains(first, tc.want) || strings.Contains(errb.String(), "S3cretpw") || out.Len() != 0 {
			t.Errorf("%q: exit %d, first line %q, stdout %q; want %d naming %q", tc.args, cli.Code(err), first, out.String(), tc.code, tc.want)
		}
	}
	if _, err := os.Stat("/dev/null-journal"); err == nil {
		t.Error("/dev/null-journal was left behind")
	}
}

// TestInterruptWhileDialing: a broker that accepts the connection and never
// answers would hold the handshake for its whole timeout; SIGINT ends the
// consumer within a second. A first signal is the consumer's ordinary end
// (exit 0, as at --max-seconds), but a run that never consumed prints no
// summary.
func TestInterruptWhileDialing(t *testing.T) {
	url, accepted := brokertest.SilentBroker(t)
	cmd := exec.Command(brokertest.Binary(t, "eaimq/consumer"), "--claim", "http://127.0.0.1:9", "--max-seconds", "60")
	cmd.Env = append(os.Environ(), broker.EnvURL+"="+url, store.EnvPath+"="+filepath.Join(t.TempDir(), "p.db"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	took := brokertest.InterruptWhileConnecting(t, cmd, accepted)
	if took > time.Second {
		t.Errorf("exited %s after SIGINT, want within 1s", took)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 || out.Len() != 0 {
		t.Errorf("exit %d, stdout %q; want 0 and no summary\n%s", code, out.String(), errb.String())
	}
}
