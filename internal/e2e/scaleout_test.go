package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/pgtest"
	"eaimq/internal/topo"
)

// Fault-suite rows for scale-out: several consumer processes on one dedup
// store in PostgreSQL, and the move of claim.in to a quorum queue.

// TestFaultConsumerKilledPostgres: three consumers share one PostgreSQL
// store; one is SIGKILLed while it holds claims in progress. Its claims are
// taken over at once (its database session died with it, and so did its
// locks), not after a lease; only the calls it made and never recorded are
// made twice.
func TestFaultConsumerKilledPostgres(t *testing.T) {
	t.Parallel()
	const claims, prefetch = 60, 5
	w := newWorld(t)
	w.db = pgtest.New(t)
	published := w.publishFiles(brokertest.Claims("pk", "C-pk", claims, true)...)
	hold := 10
	w.partner.Set(claimsys.Control{HoldAfter: &hold})
	t.Cleanup(w.partner.Release)
	// --http-timeout 60s: a lease would keep the victim's claims for
	// 2 × 60 s + 30 s; the session lock frees them when it dies.
	args := []string{"--claim", w.url, "--max-seconds", "120", "--prefetch", fmt.Sprint(prefetch), "--http-timeout", "60s"}
	victim := w.start("consumer", args...)
	brokertest.Eventually(t, 30*time.Second, "the victim holds claims at the partner", func() bool { return w.partner.Held() == prefetch })
	a, b := w.start("consumer", args...), w.start("consumer", args...)
	brokertest.Eventually(t, 30*time.Second, "all three hold claims", func() bool { return w.partner.Held() == 3*prefetch })
	victim.kill()
	killed := time.Now()
	w.partner.Release()
	brokertest.Eventually(t, 60*time.Second, "every claim delivered", func() bool { return len(w.partner.Stats().Accepted) == claims })
	took := time.Since(killed)
	if took > 20*time.Second {
		t.Errorf("the claims took %s to be taken over and delivered; a lease would take 150 s, a session lock seconds", took)
	}
	brokertest.Eventually(t, 30*time.Second, "claim.in drained", func() bool {
		q := w.vh.Queues(t)[topo.Queue]
		return q.Messages == 0 && q.Unacked == 0
	})
	a.stop(t)
	b.stop(t)
	w.account("a consumer SIGKILLed holding claims, two others running, PostgreSQL store", published, prefetch,
		fmt.Sprintf("≤ prefetch %d (its calls the partner finished, never recorded)", prefetch),
		fmt.Sprintf("all delivered %.1fs after the kill (--http-timeout 60s: a lease would hold them 150 s)", took.Seconds()))
}

// TestFaultMigrateToQuorum: a classic claim.in holding 1,000 claims (and
// dead letters in claim.dead) is moved to quorum queues with topology
// -migrate quorum; a consumer then drains it. Every claim is delivered
// once, every dead letter is still there, none twice.
func TestFaultMigrateToQuorum(t *testing.T) {
	t.Parallel()
	const claims, dead = 1000, 20
	w := newWorld(t) // classic topology, as the lab declares it
	deadOnes := w.publishFiles(brokertest.Claims("mq-dead", "C-mqd", dead, false)...)
	w.drainWith() // the 422s go to claim.dead
	published := w.publishFiles(brokertest.Claims("mq", "C-mq", claims, true)...)
	if q := w.vh.Queues(t); q[topo.Queue].Messages != claims || q[topo.DeadQueue].Messages != dead {
		t.Fatalf("before: %+v", q)
	}
	r := w.run("topology", "-migrate", "quorum")
	if r.code != 0 {
		t.Fatalf("topology -migrate quorum: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	out, err := w.vh.Ctl.Run(context.Background(), "-q", "list_queues", "-p", w.vh.Name, "--no-table-headers", "name", "type")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"claim.in\tquorum", "claim.dead\tquorum"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("after the migration, want %q in:\n%s", want, out)
		}
	}
	// Counts from the queues' leaders (a passive declare): list_queues
	// shows a quorum queue's counts as of its last stats tick.
	if in, d := w.vh.Depth(t, topo.Queue), w.vh.Depth(t, topo.DeadQueue); in != claims || d != dead {
		t.Errorf("after the migration: claim.in %d, claim.dead %d; want %d, %d", in, d, claims, dead)
	}
	// Drain until the partner has every claim and claim.in's leader says it
	// is empty: list_queues (which drainWith reads) shows a quorum queue's
	// counts as of its last stats tick, and may still say 0 from before.
	p := w.start("consumer", "--claim", w.url, "--max-seconds", "120")
	brokertest.Eventually(t, 90*time.Second, "every claim delivered", func() bool {
		if p.exited() {
			t.Fatalf("consumer exited: %s", p.errb.String())
		}
		return len(w.partner.Stats().Accepted) == claims && w.vh.Depth(t, topo.Queue) == 0
	})
	p.stop(t)
	brokertest.Eventually(t, 30*time.Second, "list_queues catches up with claim.in", func() bool {
		q := w.vh.Queues(t)[topo.Queue]
		return q.Messages == 0 && q.Unacked == 0
	})
	w.calledEach(published, 1, "moved once, delivered once")
	w.account("classic -> quorum migration with 1,000 claims and 20 dead letters", append(published, deadOnes...), 0, "0",
		"topology -migrate quorum, then a consumer drains the quorum claim.in")
}
