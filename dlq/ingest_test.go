package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// startDLQ starts the dlq binary with args against w, and returns its
// stderr so far and how to stop it with SIGTERM (its error then).
func (w *world) startDLQ(args ...string) (*exec.Cmd, *brokertest.Buffer) {
	w.t.Helper()
	cmd := exec.Command(brokertest.Binary(w.t, "eaimq/dlq"), args...)
	cmd.Env = append(os.Environ(), broker.EnvURL+"="+w.vh.URL, store.EnvPath+"="+w.db)
	var errb brokertest.Buffer
	cmd.Stderr = &errb
	return cmd, &errb
}

func (w *world) drained() {
	w.t.Helper()
	brokertest.Eventually(w.t, 30*time.Second, "claim.dead empty, nothing unacked", func() bool {
		q := w.vh.Queues(w.t)[topo.DeadQueue]
		return q.Messages == 0 && q.Unacked == 0
	})
}

// TestIngestThenListFromTheStore: dlq ingest takes claim.dead's dead
// letters into the store and exits 0 on SIGTERM; list and show then read
// them from the store, row for row what they showed from the queue (one
// model, two sources), and say in one line what claim.dead still holds;
// -queue walks the queue; replay, purge and restore act on the rows.
func TestIngestThenListFromTheStore(t *testing.T) {
	w := mixedRun(t)
	fromQueue := w.rows()
	cmd, errb := w.startDLQ("ingest", "-batch", "3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.drained()
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("dlq ingest after SIGTERM: %v\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "dlq ingest: consuming claim.dead into the store") {
		t.Errorf("dlq ingest's stderr:\n%s", errb.String())
	}

	w.deadLetter(amqp.Publishing{MessageId: "after-0", Body: brokertest.Claim("after-0", "C-A0")})
	code, out, errs := w.dlq("-json", "list")
	if code != 0 {
		t.Fatalf("list: %d %s", code, errs)
	}
	fromStore := w.rows()
	if len(fromStore) != len(fromQueue) {
		t.Fatalf("list from the store: %d rows, want the %d ingested only\n%s", len(fromStore), len(fromQueue), out)
	}
	for k, q := range fromQueue {
		// x-delivery-count aside (none on a classic queue), a row
		// is the same from either source.
		if s := fromStore[k]; s.MessageID != q.MessageID || s.ClaimID != q.ClaimID || !s.DeadAt.Equal(q.DeadAt) || s.Broker != q.Broker ||
			s.Count != q.Count || s.Reason != q.Reason || s.DeadReason != q.DeadReason || s.Status != q.Status || s.Excerpt != q.Excerpt ||
			s.Attempts != q.Attempts || s.OurReason != q.OurReason || s.Recorded != q.Recorded {
			t.Errorf("%s:\nfrom the store %+v\nfrom the queue %+v", k, s, q)
		}
	}
	if want := "dlq: claim.dead still holds 1 dead letter(s) not ingested yet, not shown here"; !strings.Contains(errs, want) {
		t.Errorf("list's stderr lacks %q:\n%s", want, errs)
	}
	if code, out, errs := w.dlq("-queue", "list"); code != 0 || !strings.Contains(out, "after-0") || strings.Contains(out, "nodocs-0") {
		t.Errorf("-queue list: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := w.dlq("show", "C-N0"); code != 0 || !strings.Contains(out, "message_id:    nodocs-0") ||
		!strings.Contains(out, "rejected: rejected by the claim system") || !strings.Contains(out, "status=422") {
		t.Errorf("show C-N0 from the store: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := w.dlq("-reason", "rejected", "list"); code != 0 ||
		!strings.Contains(out, "2 dead letter(s) listed of 2 looked at, from the store's ingested dead letters") {
		t.Errorf("list -reason rejected from the store: %d\n%s%s", code, out, errs)
	}
	// The actions act on the rows: replay sends a copy once, purge
	// keeps the row as the archive, restore brings it back; -queue acts
	// on claim.dead, and says that the ingested ones are left.
	if code, out, errs := w.dlq("replay", "nodocs-0"); code != 0 || !strings.Contains(out, "replayed nodocs-0") {
		t.Errorf("replay nodocs-0 from the store: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := w.dlq("replay", "nodocs-0"); code != 1 || strings.Contains(out, "replayed nodocs-0") {
		t.Errorf("replay nodocs-0 again: %d (want 1: not there any more)\n%s%s", code, out, errs)
	}
	if n := w.vh.Depth(t, topo.Queue); n != 1 {
		t.Errorf("claim.in holds %d, want the one copy", n)
	}
	if code, out, errs := w.dlq("-yes", "purge", "C-N1"); code != 0 || !strings.Contains(out, "archived nodocs-1") ||
		!strings.Contains(out, "purged 1 dead letter(s) into the store's archive of purged dead letters") {
		t.Errorf("purge C-N1 from the store: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := w.dlq("list"); code != 0 || strings.Contains(out, "nodocs-1") || strings.Contains(out, "nodocs-0") ||
		!strings.Contains(out, "2 dead letter(s) listed of 2 looked at") {
		t.Errorf("list after the replay and the purge: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := w.dlq("-archive", "list"); code != 0 || !strings.Contains(out, "nodocs-1") ||
		!strings.Contains(out, "1 dead letter(s) listed of 1 looked at, from the store's archive") {
		t.Errorf("list -archive: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := w.dlq("restore", "nodocs-1"); code != 0 || !strings.Contains(out, "restored nodocs-1") {
		t.Errorf("restore nodocs-1: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := w.dlq("list"); code != 0 || !strings.Contains(out, "nodocs-1") {
		t.Errorf("list after the restore: %d\n%s%s", code, out, errs)
	}
	if _, _, errs := w.dlq("-queue", "replay", "nodocs-1"); !strings.Contains(errs, "dlq: -queue: replay acts on what claim.dead still holds; the dead letters ingested into the store are left") {
		t.Errorf("replay -queue does not say it leaves the ingested ones:\n%s", errs)
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 1 {
		t.Errorf("claim.dead holds %d, want the 1 not ingested", n)
	}
}

// TestServeIngest: dlq serve -ingest serves the page and ingests in one
// process; SIGTERM stops both, exit 0.
func TestServeIngest(t *testing.T) {
	w := mixedRun(t)
	cmd, errb := w.startDLQ("serve", "-ingest", "-addr", "127.0.0.1:0", "-refresh", "0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !regexp.MustCompile(`serving http://\S+/`).MatchString(line) {
		cmd.Process.Kill()
		t.Fatalf("dlq serve -ingest printed %q: %v\n%s", line, err, errb.String())
	}
	w.drained()
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("dlq serve -ingest after SIGTERM: %v\n%s", err, errb.String())
	}
	_, out, errs := w.dlq("list")
	if !strings.Contains(out, "4 dead letter(s) listed of 4 looked at, from the store's ingested dead letters") {
		t.Errorf("list after serve -ingest:\n%s%s", out, errs)
	}
	if !bytes.Contains([]byte(errb.String()), []byte("dlq: serve -ingest: the page shows the dead letters ingested into the store")) {
		t.Errorf("serve -ingest's stderr:\n%s", errb.String())
	}
}
