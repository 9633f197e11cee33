package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/topo"
)

// TestFaultClusterNodeDown: claim.in and claim.dead as quorum queues on the
// local three-node cluster (scripts/cluster.sh); a node that leads neither
// is crashed (SIGKILL), and with it down, claims the partner rejects (422:
// no docs) and good ones go through the installed consumer. Two of three
// members are a majority, so every 422 must end in claim.dead (at-least-once
// dead-lettering) and every good claim be delivered: lost 0, unexpected 0,
// duplicates 0. The node is started again and rejoins.
func TestFaultClusterNodeDown(t *testing.T) {
	const good, rejected = 40, 20
	start := time.Now()
	c := brokertest.ClusterUp(t)
	t.Logf("cluster up after %s", time.Since(start).Round(time.Millisecond))
	vh := c.VHost(t)
	w := &world{t: t, vh: vh, db: filepath.Join(t.TempDir(), "processed.db"), bin: installed(t), partner: claimsys.New()}
	w.url = newPartnerServer(t, w.partner)
	if r := w.run("topology", "-queue-type", "quorum"); r.code != 0 || !strings.Contains(r.stdout, "2 quorum queues") {
		t.Fatalf("topology -queue-type quorum: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := w.run("topology", "-queue-type", "quorum"); r.code != 0 {
		t.Fatalf("topology -queue-type quorum, again: exit %d\n%s", r.code, r.stderr)
	}

	// Each queue has a member on every node; the victim leads neither.
	leaders := map[string]bool{}
	for _, q := range []string{topo.Queue, topo.DeadQueue} {
		info := c.QueueInfo(t, vh.Name, q, 1)
		members := slices.Clone(info.Members)
		slices.Sort(members)
		if info.Type != "quorum" || !slices.Equal(members, []string{"eaimq1@localhost", "eaimq2@localhost", "eaimq3@localhost"}) {
			t.Fatalf("%s: %+v; want a quorum queue with a member on each node", q, info)
		}
		leaders[info.Leader] = true
	}
	var victim, leader brokertest.ClusterNode
	for _, n := range c.Nodes() {
		if !leaders[n.Name] && victim.N == 0 {
			victim = n
		}
	}
	info := c.QueueInfo(t, vh.Name, topo.Queue, 1)
	leader = c.NodeNamed(t, info.Leader)
	t.Logf("claim.in leader %s, claim.dead leader %s; killing %s", info.Leader, c.QueueInfo(t, vh.Name, topo.DeadQueue, 1).Leader, victim.Name)
	// Everything from here talks to claim.in's leader, which stays up.
	w.vh = c.On(t, vh, leader.N)

	killed := time.Now()
	c.Kill(t, victim.N)
	// Really down, and the others know it.
	if !victim.Down() {
		t.Fatalf("%s still answers after the kill", victim.Name)
	}
	brokertest.Eventually(t, 60*time.Second, "the cluster sees "+victim.Name+" gone", func() bool {
		return !slices.Contains(c.RunningNodes(t, leader.N), victim.Name)
	})
	if l := c.QueueInfo(t, vh.Name, topo.Queue, leader.N).Leader; l != leader.Name {
		t.Fatalf("claim.in's leader moved to %s when %s went down", l, victim.Name)
	}

	published := w.publishFiles(append(brokertest.Claims("qq-bad", "C-qq-bad", rejected, false),
		brokertest.Claims("qq-good", "C-qq-good", good, true)...)...)
	p := w.start("consumer", "--claim", w.url, "--max-seconds", "120")
	// Passive declares (Depth) ask the queue's leader: list_queues shows a
	// quorum queue's counts as of its last stats tick.
	brokertest.Eventually(t, 90*time.Second, "every claim delivered or dead-lettered", func() bool {
		if p.exited() {
			t.Fatalf("consumer exited: %s", p.errb.String())
		}
		return len(w.partner.Stats().Accepted) == good && w.vh.Depth(t, topo.DeadQueue) == rejected && w.vh.Depth(t, topo.Queue) == 0
	})
	p.stop(t)
	if !victim.Down() {
		t.Fatalf("%s came back during the run: the fault did not hold", victim.Name)
	}
	brokertest.Eventually(t, 30*time.Second, "list_queues catches up with claim.in", func() bool {
		q := w.vh.Queues(t)[topo.Queue]
		return q.Messages == 0 && q.Unacked == 0
	})
	w.account("cluster: a non-leader node killed, 422s and good claims", published, 0, "0",
		fmt.Sprintf("quorum queues on 3 nodes, %s down for the run; %d dead-lettered at-least-once", victim.Name, rejected))
	if st := w.partner.Stats(); st.ByStatus["422"] != rejected {
		t.Errorf("partner answered 422 %d times, want %d (one call per rejected claim)", st.ByStatus["422"], rejected)
	}

	c.Start(t, victim.N)
	t.Logf("%s down for %s; test took %s", victim.Name, time.Since(killed).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	brokertest.Eventually(t, 60*time.Second, "claim.in has all three members running again", func() bool {
		return len(c.RunningNodes(t, leader.N)) == 3
	})
}
