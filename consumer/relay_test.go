package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/cli"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// TestMixedBatch is the lab's whole story: good claims delivered once, 422s
// dead-lettered after one call, BUSY claims called exactly twice and then
// dead-lettered; nothing left in claim.in, nothing unacked.
func TestMixedBatch(t *testing.T) {
	h := newHarness(t)
	claims := brokertest.Claims("good", "C-good", 10, true)
	claims = append(claims, brokertest.Claims("nodocs", "C-nodocs", 3, false)...)
	claims = append(claims, brokertest.Claims("busy", "BUSY", 3, true)...)
	h.vh.PublishClaims(t, claims...)
	c := h.runUntil("10 delivered, 3 rejected, 3 busy twice", func() bool {
		return h.totalCalls() == 10+3+6 && h.vh.Depth(t, topo.DeadQueue) == 6
	})
	if c.code != 0 {
		t.Fatalf("exit %d:\n%s", c.code, c.stderr.String())
	}
	for _, g := range guids("good", 10) {
		if n := h.calls(g); n != 1 {
			t.Errorf("%s called %d times, want 1", g, n)
		}
	}
	for _, g := range guids("nodocs", 3) {
		if n := h.calls(g); n != 1 {
			t.Errorf("%s (422) called %d times, want 1", g, n)
		}
	}
	for _, g := range guids("busy", 3) {
		if n := h.calls(g); n != 2 {
			t.Errorf("%s (503) called %d times, want exactly 2", g, n)
		}
	}
	h.assertQueues(0, 0, 6)
	if !brokertest.ContainsAll(c.stdout.String(), "10 delivered", "6 dead-lettered (3 rejected by the claim system, 3 failed twice") {
		t.Errorf("summary: %s", c.stdout.String())
	}
	for _, line := range []string{"outcome=delivered", "outcome=dead-lettered", "outcome=requeued", "claim_id=BUSY-000"} {
		if !strings.Contains(c.stderr.String(), line) {
			t.Errorf("log lacks %q", line)
		}
	}
}

// TestDuplicatesAcrossRestart: one guid published three times in one run is
// POSTed once; after a restart, a fourth copy is acked without a call.
func TestDuplicatesAcrossRestart(t *testing.T) {
	h := newHarness(t)
	dup := brokertest.Claim("dup-1", "C-dup", "r.pdf")
	h.vh.PublishClaims(t, dup, dup, dup)
	c := h.runUntil("3 copies handled", h.drained)
	if !strings.Contains(c.stdout.String(), "1 delivered, 2 duplicates skipped") {
		t.Errorf("first run summary: %s", c.stdout.String())
	}
	if n := h.calls("dup-1"); n != 1 {
		t.Fatalf("POSTed %d times, want 1", n)
	}
	h.vh.PublishClaims(t, dup)
	c2 := h.runUntil("the copy after restart handled", h.drained)
	if n := h.calls("dup-1"); n != 1 {
		t.Errorf("after restart: POSTed %d times, want 1", n)
	}
	if !strings.Contains(c2.stdout.String(), "1 duplicates skipped") {
		t.Errorf("second run summary: %s", c2.stdout.String())
	}
	h.assertQueues(0, 0, 0)
}

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

// TestConnectionClosedUnderConsumer: the broker closes the consumer's
// connection mid-run; it reconnects and finishes, and nothing is processed
// twice.
func TestConnectionClosedUnderConsumer(t *testing.T) {
	h := newHarness(t)
	// The gate: after 5 claims the partner holds every call, so claims are
	// in flight and unacked when the broker closes the connection, however
	// fast the machine.
	five := 5
	h.partner.Set(claimsys.Control{HoldAfter: &five})
	t.Cleanup(h.partner.Release) // before the server's Close, which waits for held calls
	h.vh.PublishClaims(t, brokertest.Claims("rc", "C-rc", 30, true)...)
	c := h.start()
	brokertest.Eventually(t, 30*time.Second, "calls held at the partner", func() bool { return h.partner.Held() > 0 })
	if _, err := h.vh.Ctl.Run(context.Background(), "-q", "close_all_connections", "-p", h.vh.Name, "test: broker closes connection"); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 30*time.Second, "the consumer saw the connection go", func() bool {
		return strings.Contains(c.stderr.String(), "connection lost")
	})
	h.partner.Release()
	brokertest.Eventually(t, 60*time.Second, "all 30 delivered after reconnect", func() bool {
		return len(h.partner.Stats().Accepted) == 30 && h.vh.Depth(t, topo.Queue) == 0
	})
	c.wait(t)
	if !strings.Contains(c.stderr.String(), "reconnected") {
		t.Errorf("no reconnect in the log:\n%s", c.stderr.String())
	}
	for g, n := range h.partner.Stats().Accepted {
		if n != 1 {
			t.Errorf("%s accepted %d times", g, n)
		}
	}
	h.assertQueues(0, 0, 0)
}

// TestUnexpectedInput: no message_id (falls back to the guid), no id at
// all, a body that is not JSON, and a 1 MiB body. No crash, no loop; each
// ends delivered or dead-lettered, with the reason on record.
func TestUnexpectedInput(t *testing.T) {
	h := newHarness(t)
	huge := []byte(`{"guid":"huge-1","claimId":"C-H","docs":["r.pdf"],"pad":"` + strings.Repeat("x", 1<<20) + `"}`)
	h.vh.Publish(t,
		amqp.Publishing{Body: brokertest.Claim("guid-only", "C-G", "r.pdf")},   // no message_id
		amqp.Publishing{Body: []byte(`{"claimId":"C-anon","docs":["r.pdf"]}`)}, // no id at all
		amqp.Publishing{MessageId: "plain-1", ContentType: "text/plain", Body: []byte("hello, not json")},
		amqp.Publishing{MessageId: "huge-1", Body: huge},
	)
	c := h.runUntil("all four handled", func() bool {
		return h.drained() && h.vh.Depth(t, topo.DeadQueue) == 2
	})
	if c.code != 0 {
		t.Fatalf("exit %d", c.code)
	}
	if h.calls("guid-only") != 1 || h.calls("huge-1") != 1 {
		t.Errorf("calls: %v", h.partner.Stats().ByGuid)
	}
	if !brokertest.ContainsAll(c.stderr.String(), "no message_id and no guid", "message_id=guid-only") {
		t.Errorf("log:\n%s", c.stderr.String())
	}
	st, err := store.Open(h.db, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec, found, _ := st.Get(context.Background(), "plain-1")
	if !found || rec.State != "dead" || rec.LastStatus != 400 {
		t.Errorf("not-JSON claim record: %+v found=%v", rec, found)
	}
	h.assertQueues(0, 0, 2)
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

// TestTwoConsumersOneStore: two consumers share one EAI_MQ_DB and one queue;
// a guid published many times is POSTed once.
func TestTwoConsumersOneStore(t *testing.T) {
	h := newHarness(t)
	h.partner.Set(claimsysDelay(200))
	dup := brokertest.Claim("shared-1", "C-S", "r.pdf")
	h.vh.PublishClaims(t, dup, dup, dup, dup, dup, dup)
	a, b := h.start(), h.start()
	brokertest.Eventually(t, 30*time.Second, "all copies acked", h.drained)
	var wg sync.WaitGroup
	for _, c := range []*consumer{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); c.wait(t) }()
	}
	wg.Wait()
	if n := h.calls("shared-1"); n != 1 {
		t.Errorf("POSTed %d times by two consumers, want 1", n)
	}
}

// TestSecondSignalExitsAtOnce: a stop (first signal) waits for the calls
// in flight; a second one abandons them at once, with exit 130, and every
// unacked claim goes back to claim.in.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	h := newHarness(t)
	h.partner.Set(claimsysDelay(3000))
	h.vh.PublishClaims(t, brokertest.Claims("sig", "C-sig", 5, true)...)
	c := h.start()
	brokertest.Eventually(t, 10*time.Second, "calls in flight", func() bool { return h.partner.Stats().MaxConcurrency >= 1 })
	c.stop()
	c.kill()
	start := time.Now()
	select {
	case <-c.done:
	case <-time.After(2 * time.Second):
		t.Fatal("the second signal did not end the run within 2s (the partner takes 3s)")
	}
	if c.code != cli.ExitInterrupted {
		t.Errorf("exit %d, want %d", c.code, cli.ExitInterrupted)
	}
	t.Logf("exited %s after the second signal", time.Since(start).Round(time.Millisecond))
	brokertest.Eventually(t, 10*time.Second, "all five back in claim.in", func() bool {
		q := h.vh.Queues(t)[topo.Queue]
		return q.Messages == 5 && q.Unacked == 0
	})
}

// TestRefusesToDropClaims: claim.in without the dead-letter arguments, or
// eai.dlx missing, would make a 422 vanish; the consumer refuses to start.
func TestRefusesToDropClaims(t *testing.T) {
	ctx := context.Background()
	t.Run("claim.in without DLX arguments", func(t *testing.T) {
		vh := brokertest.New(t)
		ch := vh.Channel(t)
		if _, err := ch.QueueDeclare(topo.Queue, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		err := run(ctx, ctx, []string{"--claim", "http://127.0.0.1:9", "--max-seconds", "1"},
			vh.Getenv(map[string]string{store.EnvPath: t.TempDir() + "/p.db"}), &out, &errb)
		if cli.Code(err) != cli.ExitConfig || !strings.Contains(err.Error(), "dropped") {
			t.Errorf("exit %d: %v", cli.Code(err), err)
		}
	})
	t.Run("eai.dlx missing", func(t *testing.T) {
		vh := brokertest.New(t)
		vh.Topology(t)
		if err := vh.Channel(t).ExchangeDelete(topo.DLX, false, false); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		err := run(ctx, ctx, []string{"--claim", "http://127.0.0.1:9", "--max-seconds", "1"},
			vh.Getenv(map[string]string{store.EnvPath: t.TempDir() + "/p.db"}), &out, &errb)
		if cli.Code(err) != cli.ExitConfig || !strings.Contains(err.Error(), "eai.dlx") {
			t.Errorf("exit %d: %v", cli.Code(err), err)
		}
	})
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
