package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/claim"
	"eaimq/internal/claimsys"
	"eaimq/internal/cli"
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
