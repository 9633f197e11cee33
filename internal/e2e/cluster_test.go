package e2e

import (
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/pgtest"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// Fault-suite rows on the local three-node cluster (scripts/cluster.sh):
// quorum claim.in and claim.dead, a node SIGKILLed while claims are in
// flight. The node comes back before the test ends (and in t.Cleanup if
// the test fails), so the cluster is whole for the next test. They are
// serial (no t.Parallel): a node killed under another test's feet would
// be that test's fault too.

// newClusterWorld is newWorld on the cluster: a vhost there whose URL
// lists the three nodes, quorum queues declared by the real topology
// program, and a PostgreSQL store shared by every consumer.
func newClusterWorld(t *testing.T) (*world, brokertest.Cluster) {
	t.Helper()
	c := brokertest.NeedCluster(t)
	w := &world{t: t, vh: c.VHost(t), db: pgtest.New(t), bin: installed(t)}
	w.partner = claimsys.New()
	srv := httptest.NewServer(w.partner)
	t.Cleanup(srv.Close)
	w.url = srv.URL
	if r := w.run("topology", "-queue-type", "quorum"); r.code != 0 {
		t.Fatalf("topology -queue-type quorum: %d %s", r.code, r.stderr)
	}
	return w, c
}

// startOn starts a program whose EAI_AMQP_URL lists the cluster's nodes
// beginning with node first: consumers on several hosts, each with its
// own nearest node, fail over along the rest.
func (w *world) startOn(first int, name string, args ...string) *proc {
	w.t.Helper()
	urls := strings.Split(w.vh.URL, ",")
	rotated := append(append([]string{}, urls[first-1:]...), urls[:first-1]...)
	return w.startEnv(append(os.Environ(), broker.EnvURL+"="+strings.Join(rotated, ","), store.EnvPath+"="+w.db), name, args...)
}

// other returns a node of the cluster that is not n.
func other(n int) int { return n%brokertest.ClusterSize + 1 }

// TestFaultClusterLeaderKilled: 300 claims in a quorum claim.in, three
// consumer processes (one per node) sharing a PostgreSQL store, a partner
// at 20 ms. The node holding claim.in's Raft leader is SIGKILLed while
// calls are held at the partner (a gate, so the kill really happens with
// claims in flight), then restarted. A new leader is elected on the other
// two; the consumers on the dead node reconnect to the next address.
// Claims the dead node had delivered and not yet seen acked come again,
// and the shared store turns them into duplicates skipped without a call,
// except those whose 201 was never recorded.
//
// Serial: it kills a node of the shared local cluster.
func TestFaultClusterLeaderKilled(t *testing.T) {
	const claims, prefetch, consumers = 300, 5, 3
	w, c := newClusterWorld(t)
	published := w.publishFiles(brokertest.Claims("ck", "C-ck", claims, true)...)
	w.partner.Set(ms(20))
	leader := c.Leader(t, 1, w.vh.Name, topo.Queue)
	w.vh.Ctl = brokertest.ClusterCtl(other(leader)) // ask a node that will stay up
	args := []string{"--claim", w.url, "--max-seconds", "300", "--prefetch", fmt.Sprint(prefetch)}
	var procs []*proc
	for n := 1; n <= consumers; n++ {
		procs = append(procs, w.startOn(n, "consumer", args...))
	}
	brokertest.Eventually(t, 60*time.Second, "a third of the claims delivered", func() bool {
		return len(w.partner.Stats().Accepted) >= claims/3
	})
	hold := w.partner.Total()
	w.partner.Set(claimsys.Control{HoldAfter: &hold})
	t.Cleanup(w.partner.Release)
	brokertest.Eventually(t, 30*time.Second, "calls held at the partner", func() bool { return w.partner.Held() >= consumers })
	inFlight := w.partner.Held()
	c.Kill(t, leader)
	w.partner.Release()
	before := len(w.partner.Stats().Accepted)
	brokertest.Eventually(t, 120*time.Second, "claims delivered with the leader's node down", func() bool {
		return len(w.partner.Stats().Accepted) > before+prefetch*consumers
	})
	if now := c.Leader(t, other(leader), w.vh.Name, topo.Queue); now == leader {
		t.Fatalf("claim.in's leader is still %s, which was killed", brokertest.ClusterNode(leader))
	}
	c.Start(t, leader)
	brokertest.Eventually(t, 180*time.Second, "every claim delivered", func() bool {
		return len(w.partner.Stats().Accepted) == claims && w.vh.Depth(t, topo.Queue) == 0
	})
	for _, p := range procs {
		if p.exited() {
			t.Errorf("a consumer exited early: %s", p.errb.String())
			continue
		}
		p.stop(t)
	}
	brokertest.Eventually(t, 60*time.Second, "list_queues catches up with claim.in", func() bool {
		q := w.vh.Queues(t)[topo.Queue]
		return q.Messages == 0 && q.Unacked == 0
	})
	bound := prefetch * consumers
	w.account("cluster: claim.in's leader node SIGKILLed mid-run, 3 consumers, PostgreSQL store", published, bound,
		fmt.Sprintf("≤ %d (in flight: %d consumers × prefetch %d)", bound, consumers, prefetch),
		fmt.Sprintf("quorum claim.in; %s killed with %d calls held at the partner, restarted; partner 20 ms", brokertest.ClusterNode(leader), inFlight))
}

// TestFaultClusterRejectNodeDown: the node holding claim.dead's leader is
// SIGKILLed while a consumer is rejecting 422s (calls held at the partner
// at the moment of the kill). At-least-once dead-lettering keeps each
// rejected claim in claim.in until claim.dead, under its new leader, has
// confirmed it: every 422 ends in claim.dead, none dropped.
//
// Serial: it kills a node of the shared local cluster.
func TestFaultClusterRejectNodeDown(t *testing.T) {
	const good, bad = 40, 40
	w, c := newClusterWorld(t)
	var mixed [][]byte
	g, b := brokertest.Claims("nd-ok", "C-ndo", good, true), brokertest.Claims("nd-422", "C-ndb", bad, false)
	for i := range good {
		mixed = append(mixed, g[i], b[i])
	}
	published := w.publishFiles(mixed...)
	w.partner.Set(ms(20))
	deadLeader := c.Leader(t, 1, w.vh.Name, topo.DeadQueue)
	// The consumer connects to a node that stays up, so what is tested is
	// the dead-lettering across the kill, not the consumer's reconnect.
	first := other(deadLeader)
	w.vh.Ctl = brokertest.ClusterCtl(first)
	hold := 5
	w.partner.Set(claimsys.Control{HoldAfter: &hold})
	t.Cleanup(w.partner.Release)
	p := w.startOn(first, "consumer", "--claim", w.url, "--max-seconds", "300")
	brokertest.Eventually(t, 60*time.Second, "calls held at the partner", func() bool { return w.partner.Held() > 0 })
	c.Kill(t, deadLeader)
	w.partner.Release()
	brokertest.Eventually(t, 180*time.Second, "claim.in drained with claim.dead's node down", func() bool {
		if p.exited() {
			t.Fatalf("consumer exited: %s", p.errb.String())
		}
		return len(w.partner.Stats().Accepted) == good && w.vh.Depth(t, topo.Queue) == 0 && w.vh.Depth(t, topo.DeadQueue) == bad
	})
	if now := c.Leader(t, first, w.vh.Name, topo.DeadQueue); now == deadLeader {
		t.Fatalf("claim.dead's leader is still %s, which was killed", brokertest.ClusterNode(deadLeader))
	}
	p.stop(t)
	c.Start(t, deadLeader)
	brokertest.Eventually(t, 60*time.Second, "list_queues catches up with claim.in", func() bool {
		q := w.vh.Queues(t)[topo.Queue]
		return q.Messages == 0 && q.Unacked == 0
	})
	w.account("cluster: claim.dead's leader node SIGKILLed while 422s are rejected", published, 0, "0",
		fmt.Sprintf("quorum queues, at-least-once dead-lettering; all %d 422s in claim.dead, %s restarted", bad, brokertest.ClusterNode(deadLeader)))
}
