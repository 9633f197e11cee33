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

// Fault-suite rows for scale-out: quorum queues on the local three-node
// cluster, several consumer processes, one dedup store in PostgreSQL.

// TestFaultClusterLeaderKilled: 300 claims, 3 consumer processes sharing
// one PostgreSQL store, a partner at 20 ms. While claims are in flight (a
// gate at the partner holds them), the node holding claim.in's leader is
// SIGKILLed; the consumers fail over to the nodes left in their address
// list, a new leader takes over, and the node comes back.
func TestFaultClusterLeaderKilled(t *testing.T) {
	const claims, consumers, prefetch = 300, 3, 5
	c := brokertest.ClusterUp(t)
	vh := c.VHost(t)
	var urls []string
	for _, n := range c.Nodes() {
		urls = append(urls, c.On(t, vh, n.N).URL)
	}
	w := &world{t: t, vh: &brokertest.VHost{Name: vh.Name, URL: strings.Join(urls, ","), Ctl: vh.Ctl},
		db: pgtest.New(t), bin: installed(t), partner: claimsys.New()}
	w.url = newPartnerServer(t, w.partner)
	if r := w.run("topology", "-queue-type", "quorum"); r.code != 0 {
		t.Fatalf("topology -queue-type quorum: exit %d\n%s", r.code, r.stderr)
	}
	w.partner.Set(ms(20))
	published := w.publishFiles(brokertest.Claims("lk", "C-lk", claims, true)...)

	hold := 100
	w.partner.Set(claimsys.Control{HoldAfter: &hold})
	t.Cleanup(w.partner.Release)
	var ps []*proc
	for range consumers {
		ps = append(ps, w.start("consumer", "--claim", w.url, "--max-seconds", "240", "--prefetch", fmt.Sprint(prefetch)))
	}
	brokertest.Eventually(t, 60*time.Second, "claims held in flight at the partner", func() bool { return w.partner.Held() >= consumers })

	leader := c.NodeNamed(t, c.QueueInfo(t, vh.Name, topo.Queue, 1).Leader)
	c.Kill(t, leader.N)
	if !leader.Down() {
		t.Fatalf("%s still answers after the kill", leader.Name)
	}
	// From here rabbitmqctl asks a node that is up.
	w.vh.Ctl = c.Node(leader.N%3 + 1).Ctl
	brokertest.Eventually(t, 60*time.Second, "a new leader for claim.in", func() bool {
		l := c.QueueInfo(t, vh.Name, topo.Queue, leader.N%3+1).Leader
		return l != "" && l != leader.Name
	})
	w.partner.Release()

	brokertest.Eventually(t, 180*time.Second, "all 300 delivered", func() bool {
		for _, p := range ps {
			if p.exited() {
				t.Fatalf("a consumer exited: %s", p.errb.String())
			}
		}
		return len(w.partner.Stats().Accepted) == claims
	})
	c.Start(t, leader.N)
	brokertest.Eventually(t, 60*time.Second, "claim.in empty, nothing unacked", func() bool {
		q := w.vh.Queues(t)[topo.Queue]
		return q.Messages == 0 && q.Unacked == 0
	})
	for _, p := range ps {
		p.stop(t)
	}
	w.account("cluster: claim.in's leader node SIGKILLed mid-run, 3 consumers on PostgreSQL", published,
		consumers*prefetch, fmt.Sprintf("≤ %d consumers × prefetch %d (calls in flight on the dead node's channels)", consumers, prefetch),
		fmt.Sprintf("quorum queues, %s killed with calls held; Idempotency-Key would absorb %d", leader.Name, w.partner.Stats().Absorbable))
}

// TestFaultConsumerKilledPostgres: three consumers share one PostgreSQL
// store; one is SIGKILLed while it holds claims in progress. Its claims are
// taken over at once (its database session died with it, and so did its
// locks), not after a lease; only the calls it made and never recorded are
// made twice.
func TestFaultConsumerKilledPostgres(t *testing.T) {
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
