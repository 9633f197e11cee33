package e2e

import (
	"context"
	"database/sql"
	"fmt"

	"strings"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/topo"
)

// Fault-suite rows for the hardening: operator mistakes and lost messages
// that once lost a claim or called the partner again.

// TestFaultDeadQueueDeletedMidRun: an operator deletes claim.dead by hand
// (to "empty the DLQ") while a consumer runs, and does not rerun topology.
// Rejected claims must not vanish: the consumer stops with 78 and leaves
// them in claim.in; after topology, a run dead-letters them without a
// second call.
func TestFaultDeadQueueDeletedMidRun(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	good := w.publishFiles(brokertest.Claims("dq-good", "C-dqg", 10, true)...)
	p := w.start("consumer", "--claim", w.url, "--max-seconds", "120")
	brokertest.Eventually(t, 30*time.Second, "the good claims delivered", func() bool { return len(w.partner.Stats().Accepted) == len(good) })
	if _, err := w.vh.Ctl.Run(context.Background(), "-q", "delete_queue", "-p", w.vh.Name, topo.DeadQueue); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.vh.Queues(t)[topo.DeadQueue]; ok {
		t.Fatal("claim.dead still exists: the fault did not happen")
	}
	rejected := w.publishFiles(brokertest.Claims("dq-nodocs", "C-dqn", 10, false)...)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the consumer went on rejecting with no dead-letter route")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 78 || !strings.Contains(p.errb.String(), "run topology") {
		t.Fatalf("consumer: exit %d, want 78 naming topology:\n%s", code, p.errb.String())
	}
	if q := w.vh.Queues(t)[topo.Queue]; q.Messages != len(rejected) {
		t.Fatalf("claim.in holds %d, want the %d rejected claims back", q.Messages, len(rejected))
	}
	if r := w.run("topology"); r.code != 0 {
		t.Fatalf("topology: %s", r.stderr)
	}
	w.drainWith()
	w.calledEach(rejected, 1, "its decision was on record")
	w.account("claim.dead deleted mid-run, topology not rerun", append(good, rejected...), 0, "0",
		fmt.Sprintf("consumer stopped with 78; %d rejected claims waited in claim.in, then dead-lettered with no 2nd call", len(rejected)))
}

// TestFaultLabProcessedDB: the lab's consumer.py left its processed.db at
// EAI_MQ_DB. Its ids are delivered claims: acked without a call; the rest
// go through as usual.
func TestFaultLabProcessedDB(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	db, err := sql.Open("sqlite3", w.db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE processed (message_id TEXT PRIMARY KEY, processed_at REAL)`); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := db.Exec(`INSERT INTO processed VALUES (?, 1)`, fmt.Sprintf("lab-%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	labs := w.publishFiles(brokertest.Claims("lab", "C-lab", 10, true)...)
	fresh := w.publishFiles(brokertest.Claims("new", "C-new", 10, true)...)
	p := w.drainWith()
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("consumer exit %d:\n%s", code, p.errb.String())
	}
	w.calledEach(labs, 0, "the lab recorded it")
	if !strings.Contains(p.out.String(), "10 duplicates skipped") {
		t.Errorf("summary: %s", p.out.String())
	}
	w.account("the lab's processed.db at EAI_MQ_DB", fresh, 0, "0",
		fmt.Sprintf("%d ids the lab recorded acked without a call", len(labs)))
}

// TestFaultLostReject: the connection closes after a dead-letter decision
// is recorded and before the reject reaches the broker. The partner holds
// every call (a gate) until the consumer's connection is really gone, then
// answers 422. The redelivered copies meet the decision on record and are
// rejected again without a second call.
//
// Serial: the calls are held until the consumer has seen its connection
// go, which must take less than its --http-timeout; on a loaded machine
// it did not, and the timed-out calls were made again.
func TestFaultLostReject(t *testing.T) {
	w := newWorld(t)
	zero := 0
	w.partner.Set(claimsys.Control{HoldAfter: &zero})
	t.Cleanup(w.partner.Release) // runs before the server's Close, which would wait for held calls
	published := w.publishFiles(brokertest.Claims("lr", "C-lr", 5, false)...)
	p := w.start("consumer", "--claim", w.url, "--max-seconds", "120", "--prefetch", "5")
	brokertest.Eventually(t, 30*time.Second, "5 calls held at the partner", func() bool { return w.partner.Held() == 5 })
	closeConnections(t, w.vh)
	brokertest.Eventually(t, 30*time.Second, "the consumer saw its connection go", func() bool {
		return strings.Contains(p.errb.String(), "connection lost")
	})
	w.partner.Release()
	brokertest.Eventually(t, 60*time.Second, "all in claim.dead", func() bool {
		q := w.vh.Queues(t)
		return q[topo.DeadQueue].Messages == 5 && q[topo.Queue].Messages == 0 && q[topo.Queue].Unacked == 0
	})
	p.stop(t)
	w.calledEach(published, 1, "its decision was on record")
	if !strings.Contains(p.errb.String(), "rejected again without a call") {
		t.Errorf("log:\n%s", p.errb.String())
	}
	w.account("connection lost between the dead-letter record and the reject", published, 0, "0",
		"redelivered copies rejected again without a call")
}

// calledEach fails the test for each guid the partner was not called
// exactly n times.
func (w *world) calledEach(guids []string, n int, why string) {
	w.t.Helper()
	by := w.partner.Stats().ByGuid
	for _, g := range guids {
		if by[g] != n {
			w.t.Errorf("%s called %d times, want %d: %s", g, by[g], n, why)
		}
	}
}

// closeConnections closes every client connection to the vhost, as an
// operator would with rabbitmqctl close_connection.
func closeConnections(t *testing.T, vh *brokertest.VHost) {
	t.Helper()
	ctx := context.Background()
	out, err := vh.Ctl.Run(ctx, "-q", "list_connections", "--no-table-headers", "pid", "vhost")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pid, v, ok := strings.Cut(line, "\t")
		if !ok || v != vh.Name {
			continue
		}
		if _, err := vh.Ctl.Run(ctx, "-q", "close_connection", pid, "eaimq fault test"); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		t.Fatalf("no connection to vhost %s to close", vh.Name)
	}
}
