package main

import (
	"strings"
	"testing"

	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/topo"
	"eaimq/internal/topo/topotest"
)

// TestQuorumDeclareTwice: -queue-type quorum declares both queues as quorum
// queues with at-least-once dead-lettering on claim.in, twice without
// complaint; -check with the same type is clean, and -check for classic
// names the type it found.
func TestQuorumDeclareTwice(t *testing.T) {
	vh := brokertest.New(t)
	for i := 1; i <= 2; i++ {
		code, stdout, stderr := runTopology(t, vh, "-queue-type", "quorum")
		if code != 0 || !strings.Contains(stdout, "2 quorum queues") {
			t.Fatalf("run %d: exit %d: %s%s", i, code, stdout, stderr)
		}
	}
	in := topotest.WantTypes(t, vh, topo.Quorum)[topo.Queue]
	if in.Arguments["x-dead-letter-strategy"] != "at-least-once" || in.Arguments["x-overflow"] != "reject-publish" {
		t.Errorf("claim.in: %v", in.Arguments)
	}
	if code, stdout, stderr := runTopology(t, vh, "-check", "-queue-type", "quorum"); code != 0 || !strings.Contains(stdout, "ok      queue claim.in (durable, x-queue-type=quorum") {
		t.Errorf("-check -queue-type quorum: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ := runTopology(t, vh, "-check")
	if code != cli.ExitConfig || !strings.Contains(stdout, "a quorum queue, not classic (0 ready); topology -migrate classic") {
		t.Errorf("-check (classic) on quorum queues: exit %d, want %d naming the type:\n%s", code, cli.ExitConfig, stdout)
	}
}

// TestQueueTypeConflictPlan: claim.in exists as a classic queue holding
// claims; -queue-type quorum says so (78) with the -migrate plan and
// changes nothing.
func TestQueueTypeConflictPlan(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	vh.PublishClaims(t, brokertest.Claims("plan", "C-plan", 3, true)...)
	code, stdout, stderr := runTopology(t, vh, "-queue-type", "quorum")
	if code != cli.ExitConfig || stdout != "" {
		t.Fatalf("exit %d, want %d and nothing on stdout: %s%s", code, cli.ExitConfig, stdout, stderr)
	}
	for _, want := range []string{"claim.dead", "is a classic queue", "topology -migrate quorum", "stop the consumers"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the plan lacks %q:\n%s", want, stderr)
		}
	}
	// claim.dead comes first in the contract; once it is quorum, the plan
	// for claim.in names its claims.
	ch := vh.Channel(t)
	if _, err := ch.QueueDelete(topo.DeadQueue, false, true, false); err != nil {
		t.Fatal(err)
	}
	_, _, stderr = runTopology(t, vh, "-queue-type", "quorum")
	if !strings.Contains(stderr, "queue claim.in in vhost \""+vh.Name+"\" is a classic queue holding 3 ready claim(s)") {
		t.Errorf("the plan does not name claim.in's claims:\n%s", stderr)
	}
	if qs := topotest.ListQueues(t, vh); qs[topo.Queue].Type != "classic" || qs[topo.Queue].Messages != 3 {
		t.Errorf("claim.in changed: %+v", qs[topo.Queue])
	}
	if code, _, stderr := runTopology(t, vh, "-migrate", "quorum", "-check"); code != cli.ExitUsage {
		t.Errorf("-migrate with -check: exit %d, want 2: %s", code, stderr)
	}
	if code, _, stderr := runTopology(t, vh, "-queue-type", "raft"); code != cli.ExitUsage {
		t.Errorf("-queue-type raft: exit %d, want 2: %s", code, stderr)
	}
}
