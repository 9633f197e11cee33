package e2e

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/topo"
)

// callClock passes calls to the partner through and notes when call number
// mark+1 arrived: the first call after the first mark.
type callClock struct {
	h    http.Handler
	mark int

	mu    sync.Mutex
	calls int
	after time.Time
}

func (c *callClock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		c.mu.Lock()
		c.calls++
		if c.calls == c.mark+1 {
			c.after = time.Now()
		}
		c.mu.Unlock()
	}
	c.h.ServeHTTP(w, r)
}

func (c *callClock) firstAfterMark() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.after
}

// TestFaultDLQReplayWhileConsuming: 300 claims the partner rejects (no
// docs: 422) sit in claim.dead; `dlq replay -all` runs while a consumer
// runs, so the replayed copies are rejected again and come back to the
// tail of claim.dead while the walk goes on. One replay run must replay
// each dead letter once: 300 replayed, each claim called exactly twice in
// all. (A walk that went on until claim.dead was empty replayed 305, and
// with more dead letters each about 6 times.)
func TestFaultDLQReplayWhileConsuming(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	const n = 300
	// The first round of rejections are calls 1 to n, the probe below is
	// call n+1, and call n+2 is the first replayed copy at the partner.
	clock := &callClock{h: w.partner, mark: n + 1}
	srv := httptest.NewServer(clock)
	t.Cleanup(srv.Close)
	w.url = srv.URL

	published := w.publishFiles(brokertest.Claims("replay", "C-replay", n, false)...)
	w.drainWith()
	if d := w.vh.Depth(t, topo.DeadQueue); d != n {
		t.Fatalf("setup: claim.dead holds %d, want %d", d, n)
	}

	// Gate: a consumer is up and consuming before the replay starts (a
	// probe claim reaches the partner through it).
	c := w.start("consumer", "--claim", w.url, "--max-seconds", "60")
	published = append(published, w.publishFiles(brokertest.Claim("replay-probe", "C-probe", "r.pdf"))...)
	brokertest.Eventually(t, 30*time.Second, "the consumer delivers a probe", func() bool {
		if c.exited() {
			t.Fatalf("consumer exited: %s", c.errb.String())
		}
		return w.partner.Stats().Accepted["replay-probe"] == 1
	})

	r := w.run("dlq", "replay", "-all")
	ended := time.Now()
	lines := strings.Count(r.stdout, "\nreplayed ")
	if strings.HasPrefix(r.stdout, "replayed ") {
		lines++
	}
	if r.code != 0 || !strings.Contains(r.stdout, "dlq: 300 replayed,") || lines != n {
		t.Errorf("dlq replay -all: exit %d, %d \"replayed\" lines, want %d\n%s%s", r.code, lines, n, lastLines(r.stdout, 5), r.stderr)
	}

	// The consumer rejects every copy again.
	brokertest.Eventually(t, 60*time.Second, "every replayed copy rejected again", func() bool {
		if c.exited() {
			t.Fatalf("consumer exited: %s", c.errb.String())
		}
		q := w.vh.Queues(t)
		return q[topo.Queue].Messages == 0 && q[topo.Queue].Unacked == 0 && q[topo.DeadQueue].Messages >= n &&
			w.partner.Stats().Total >= 2*n+1
	})
	c.stop(t)
	// The fault: rejected copies came back to claim.dead while the replay
	// still walked it. Without that, this run proves nothing.
	first := clock.firstAfterMark()
	if first.IsZero() || !first.Before(ended) {
		t.Fatalf("no replayed copy reached the partner before dlq replay ended (first at %v, dlq ended %v): "+
			"the scenario did not happen", first.Format(time.StampMicro), ended.Format(time.StampMicro))
	}
	t.Logf("first replayed copy at the partner %v before dlq replay ended (it took %v)", ended.Sub(first), r.took)

	st := w.partner.Stats()
	over := 0
	for _, id := range published[:n] {
		if st.ByGuid[id] != 2 {
			over++
			if over <= 5 {
				t.Errorf("%s: called %d times, want 2 (once, and once after the one replay)", id, st.ByGuid[id])
			}
		}
	}
	if d := w.vh.Depth(t, topo.DeadQueue); d != n {
		t.Errorf("claim.dead holds %d, want %d", d, n)
	}
	w.account("dlq replay -all with a consumer running", published, 0, "0",
		"300 rejected claims replayed once each while rejected again; each called twice")
}

// TestFaultDLQPurgeMistypedStore: with EAI_MQ_DB mistyped, every dead
// letter looked "unknown" and `dlq -reason unknown -yes purge -all` deleted
// them all. It must refuse (74) and delete nothing.
func TestFaultDLQPurgeMistypedStore(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	const n = 20
	published := w.publishFiles(brokertest.Claims("typo", "C-typo", n, false)...)
	w.drainWith()
	// Gate: the dead letters are there, and the real store knows them.
	if d := w.vh.Depth(t, topo.DeadQueue); d != n {
		t.Fatalf("setup: claim.dead holds %d, want %d", d, n)
	}
	if r := w.run("dlq", "-json", "-reason", "rejected", "list"); r.code != 0 || strings.Count(r.stdout, "\n") != n {
		t.Fatalf("setup: the store does not record %d rejections: %d\n%s%s", n, r.code, r.stdout, r.stderr)
	}

	real := w.db
	w.db = filepath.Join(filepath.Dir(real), "procesed.db") // one letter off
	if _, err := os.Stat(w.db); err == nil {
		t.Fatalf("%s exists", w.db)
	}
	r := w.run("dlq", "-reason", "unknown", "-yes", "purge", "-all")
	w.db = real
	if r.code != 74 || !strings.Contains(r.stderr, "-no-store") || strings.Contains(r.stdout, "deleted") {
		t.Errorf("purge with a mistyped EAI_MQ_DB: exit %d, want 74\n%s%s", r.code, r.stdout, r.stderr)
	}
	if d := w.vh.Depth(t, topo.DeadQueue); d != n {
		t.Errorf("claim.dead holds %d after the refused purge, want %d", d, n)
	}
	// With the right store, none of them is unknown.
	if r := w.run("dlq", "-reason", "unknown", "-yes", "purge", "-all"); r.code != 0 || !strings.Contains(r.stdout, "purged 0") {
		t.Errorf("purge -reason unknown with the store: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	w.account("dlq purge with a mistyped EAI_MQ_DB", published, 0, "0", "refused (74); every dead letter kept")
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}
