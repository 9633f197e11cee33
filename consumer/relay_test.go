package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// TestPrefetchBoundsUnacked: a partner slowed to 500ms, 40 claims. The
// partner never sees more than P at once and does see more than 1; sampled
// unacked never exceeds P.
func TestPrefetchBoundsUnacked(t *testing.T) {
	for _, p := range []int{5, 3} {
		t.Run(fmt.Sprintf("prefetch=%d", p), func(t *testing.T) {
			h := newHarness(t)
			delay := 500
			h.partner.Set(claimsysDelay(delay))
			h.vh.PublishClaims(t, brokertest.Claims("slow", "C-slow", 40, true)...)
			args := []string{}
			if p != 5 {
				args = append(args, "--prefetch", fmt.Sprint(p)) // 5 is the default
			}
			c := h.start(args...)
			maxUnacked, samples := 0, 0
			brokertest.Eventually(t, 60*time.Second, "40 claims delivered", func() bool {
				q := h.vh.Queues(t)[topo.Queue] // rabbitmqctl, as the lab checks it
				maxUnacked = max(maxUnacked, q.Unacked)
				samples++
				return h.partner.Stats().ByStatus["201"] == 40
			})
			c.wait(t)
			if maxUnacked > p {
				t.Errorf("sampled unacked reached %d, want at most %d", maxUnacked, p)
			}
			mc := h.partner.Stats().MaxConcurrency
			if mc > p || mc < 2 {
				t.Errorf("partner saw %d at once, want 2..%d", mc, p)
			}
			t.Logf("prefetch %d: max unacked %d over %d samples, partner concurrency %d", p, maxUnacked, samples, mc)
			h.assertQueues(0, 0, 0)
		})
	}
}

func TestMissingQueueAndUsage(t *testing.T) {
	vh := brokertest.New(t) // no topology
	getenv := vh.Getenv(map[string]string{store.EnvPath: t.TempDir() + "/p.db"})
	ctx := context.Background()
	var out, errb bytes.Buffer
	err := run(ctx, ctx, []string{"--claim", "http://127.0.0.1:9", "--max-seconds", "1"}, getenv, &out, &errb)
	if cli.Code(err) != cli.ExitConfig || !strings.Contains(err.Error(), "run topology first") {
		t.Errorf("missing claim.in: exit %d (%v)", cli.Code(err), err)
	}
	for _, args := range [][]string{
		{"--max-seconds", "1"},
		{"--claim", "not a url", "--max-seconds", "1"},
		{"--claim", "ftp://x", "--max-seconds", "1"},
		{"--claim", "http://x", "--prefetch", "0"},
		{"--claim", "http://x", "--max-seconds", "-1"},
		{"--claim", "http://x", "--bogus"},
	} {
		err := run(ctx, ctx, args, getenv, &out, &errb)
		if cli.Code(err) != cli.ExitUsage {
			t.Errorf("%q: exit %d, want 2 (%v)", args, cli.Code(err), err)
		}
	}
}

// TestDeadlineIsKept: --max-seconds ends the run on time with the claims in
// flight finished, not abandoned.
func TestDeadlineIsKept(t *testing.T) {
	h := newHarness(t)
	h.partner.Set(claimsysDelay(300))
	h.vh.PublishClaims(t, brokertest.Claims("dl", "C-dl", 20, true)...)
	start := time.Now()
	var out, errb bytes.Buffer
	ctx := context.Background()
	err := run(ctx, ctx, []string{"--claim", h.url, "--max-seconds", "1"}, h.getenv(), &out, &errb)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took > 1*time.Second+2*time.Second {
		t.Errorf("took %s for --max-seconds 1", took)
	}
	// Every claim the partner accepted was recorded and acked: none is
	// left unacked, and what remains in claim.in was never accepted.
	accepted := len(h.partner.Stats().Accepted)
	q := h.vh.Queues(t)[topo.Queue]
	if q.Unacked != 0 || q.Messages != 20-accepted {
		t.Errorf("after the deadline: %d accepted, claim.in %d ready %d unacked", accepted, q.Messages, q.Unacked)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("%d delivered", accepted)) {
		t.Errorf("summary %q, partner accepted %d", out.String(), accepted)
	}
}

// TestConsumeOnlyUser: a user with read and write but no configure
// permission (a common production setup) still consumes; the dead-letter
// arguments then go unchecked, with a warning.
func TestConsumeOnlyUser(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	user, pass := "eaimq-test-consume-only", "pw"
	ctl := h.vh.Ctl
	if _, err := ctl.Run(ctx, "-q", "add_user", user, pass); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Run(context.Background(), "-q", "delete_user", user) })
	if _, err := ctl.Run(ctx, "-q", "set_permissions", "-p", h.vh.Name, user, "^$", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	h.vh.PublishClaims(t, brokertest.Claim("co-1", "C-co", "r.pdf"), brokertest.Claim("co-2", "C-co2"))
	url := strings.Replace(h.vh.URL, "guest:guest", user+":"+pass, 1)
	hard, kill := context.WithCancel(ctx)
	defer kill()
	soft, stop := context.WithCancel(hard)
	var out, errb brokertest.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(soft, hard, []string{"--claim", h.url}, func(k string) string {
			return map[string]string{"EAI_AMQP_URL": url, store.EnvPath: h.db}[k]
		}, &out, &errb)
	}()
	brokertest.Eventually(t, 20*time.Second, "both handled", h.drained)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("consume-only user: %v\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "no configure permission") || h.calls("co-1") != 1 || h.vh.Depth(t, topo.DeadQueue) != 1 {
		t.Errorf("calls %v, dead %d, log:\n%s", h.partner.Stats().ByGuid, h.vh.Depth(t, topo.DeadQueue), errb.String())
	}
}
