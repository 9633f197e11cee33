package main

import (
	"strings"
	"testing"

	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/topo"
	"eaimq/internal/topo/topotest"
)

// TestArchiveQueue: topology declares claim.dead.archive with the
// retention as its x-message-ttl, on a line of its own after the lab's; a
// second run with another retention is the 406 explained (what differs,
// what to do), and -check names the difference; -archive-retention 0
// declares none; with -queue-type quorum it is a quorum queue with
// claim.dead's delivery limit.
func TestArchiveQueue(t *testing.T) {
	vh := brokertest.New(t)
	code, stdout, stderr := runTopology(t, vh, "-archive-retention", "48h")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "topology: declared 2 exchanges, 2 queues, 2 bindings") ||
		lines[1] != "topology: declared the archive queue claim.dead.archive: dlq purge keeps a claim there for 2 days (dlq restore brings it back)" {
		t.Errorf("stdout:\n%s", stdout)
	}
	if got := topotest.ListQueues(t, vh)[topo.ArchiveQueue].Arguments["x-message-ttl"]; got == nil || got.(interface{ String() string }).String() != "172800000" {
		t.Errorf("x-message-ttl %v, want 172800000 (48h)", got)
	}

	code, _, stderr = runTopology(t, vh)
	if code != cli.ExitConfig {
		t.Fatalf("another retention: exit %d, want %d: %s", code, cli.ExitConfig, stderr)
	}
	for _, want := range []string{"queue claim.dead.archive already exists", "x-message-ttl", "172800000",
		"wanted: queue claim.dead.archive (durable, x-message-ttl=1209600000)", "-archive-retention it was declared with", "dlq restore"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the 406 lacks %q:\n%s", want, stderr)
		}
	}
	code, stdout, _ = runTopology(t, vh, "-check")
	if code != cli.ExitConfig || !strings.Contains(stdout, "PROBLEM queue claim.dead.archive (durable, x-message-ttl=1209600000): differs:") {
		t.Errorf("-check with another retention: exit %d\n%s", code, stdout)
	}
	if code, stdout, stderr = runTopology(t, vh, "-check", "-archive-retention", "48h"); code != 0 || !strings.Contains(stdout, "ok      queue claim.dead.archive") {
		t.Errorf("-check with its retention: exit %d\n%s%s", code, stdout, stderr)
	}

	bare := brokertest.New(t)
	if code, stdout, stderr = runTopology(t, bare, "-archive-retention", "0"); code != 0 || strings.Contains(stdout, "archive") {
		t.Errorf("-archive-retention 0: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, ok := topotest.ListQueues(t, bare)[topo.ArchiveQueue]; ok {
		t.Error("-archive-retention 0 declared the archive")
	}
	if code, stdout, _ = runTopology(t, bare, "-check", "-archive-retention", "0"); code != 0 || strings.Contains(stdout, "archive") {
		t.Errorf("-check -archive-retention 0: exit %d\n%s", code, stdout)
	}

	// Moved to quorum: the classic archive stays, and topology keeps it.
	m := brokertest.New(t)
	for _, args := range [][]string{nil, {"-migrate", "quorum"}} {
		if code, _, stderr := runTopology(t, m, args...); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, stderr)
		}
	}
	if code, _, stderr := runTopology(t, m, "-queue-type", "quorum"); code != 0 || !strings.Contains(stderr, "claim.dead.archive in vhost") || !strings.Contains(stderr, "is a classic queue, not quorum: kept as it is") {
		t.Errorf("-queue-type quorum over the classic archive: exit %d: %s", code, stderr)
	}
	if code, stdout, _ := runTopology(t, m, "-check", "-queue-type", "quorum"); code != 0 || !strings.Contains(stdout, "ok      queue claim.dead.archive (durable, x-queue-type=quorum, x-delivery-limit=2147483647, x-message-ttl=1209600000): a classic queue (kept as it is") {
		t.Errorf("-check -queue-type quorum over the classic archive: exit %d\n%s", code, stdout)
	}

	q := brokertest.New(t)
	if code, _, stderr = runTopology(t, q, "-queue-type", "quorum"); code != 0 {
		t.Fatalf("quorum: exit %d: %s", code, stderr)
	}
	a := topotest.ListQueues(t, q)[topo.ArchiveQueue]
	if a.Type != "quorum" || a.Arguments[topo.DeliveryLimitArg] == nil || a.Arguments[topo.DeliveryLimitArg].(interface{ String() string }).String() != "2147483647" {
		t.Errorf("quorum archive: %+v", a)
	}
}
