package dlq

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/metrics"
	"eaimq/internal/store"
	"eaimq/internal/store/deadletter"
	"eaimq/internal/topo"
)

// The fault rows of ingestion (docs/fault-suite.md, "Dead letters into the
// store"): each holds its fault until it really happened, then accounts for
// every dead letter: a row each (none lost, none twice), and claim.dead
// empty with nothing unacked, so nothing was acked without its row.

// envIngestChild makes the test binary a dlq ingest process of its own
// (TestIngestChild), which the parent SIGKILLs.
const envIngestChild = "EAIMQ_TEST_INGEST_CHILD"

// TestIngestChild is not a test: it is the process TestIngestFaultKilled
// kills. It ingests EAI_MQ_DB's store from EAI_AMQP_URL's claim.dead and,
// after its first commit and before that batch's ack, says "committed" on
// stdout and blocks until it is killed.
func TestIngestChild(t *testing.T) {
	if os.Getenv(envIngestChild) == "" {
		return // run by the parent only
	}
	st, err := store.Open(os.Getenv(store.EnvPath), store.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	c := IngestConfig{Batch: 10, Wait: 20 * time.Millisecond, Hooks: IngestHooks{AfterCommit: func() error {
		// The commit returned: PutDeadLetters is durable when it does.
		// The parent kills this process now, before the ack.
		fmt.Println("committed")
		select {}
	}}}
	err = Ingest(context.Background(), os.Getenv, st, c, os.Stderr)
	fmt.Fprintln(os.Stderr, "Ingest returned:", err)
	os.Exit(4)
}

// TestIngestFaultKilled: dlq ingest SIGKILLed between a batch's commit and
// its ack. The killed process's batch comes back to claim.dead with the
// rest; the next run recognises it and acks it without a second row.
func TestIngestFaultKilled(t *testing.T) {
	cases := []struct {
		name string
		loc  func(t *testing.T) string
		qt   topo.QueueType
	}{
		{"sqlite", ingestBackends[0].loc, topo.Classic},
		{"postgres", ingestBackends[1].loc, topo.Classic},
		{"postgres-quorum", ingestBackends[1].loc, topo.Quorum},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newIngestWorldOf(t, tc.loc(t), tc.qt)
			const n = 30
			w.deadLetters(t, "kill", n)

			// The gate: the child committed its first batch and waits
			// before the ack; its rows are in the database, and the
			// broker still has the batch unacked.
			child := startGatedChild(t, "TestIngestChild", "committed",
				envIngestChild+"=1", broker.EnvURL+"="+w.vh.URL, store.EnvPath+"="+w.loc)
			if rows := len(w.rows(t, deadletter.Query{})); rows != 10 {
				t.Fatalf("%d rows at the gate, want the first batch's 10", rows)
			}
			// (A quorum queue's counts in rabbitmqctl lag by seconds.)
			brokertest.Eventually(t, 30*time.Second, "the committed batch still unacked at the gate", func() bool {
				return w.vh.Queues(t)[topo.DeadQueue].Unacked >= 10
			})
			child.kill(t)
			brokertest.Eventually(t, 30*time.Second, "claim.dead holding all 30 again", func() bool {
				q := w.vh.Queues(t)[topo.DeadQueue]
				return q.Messages == n && q.Unacked == 0
			})

			m, addr := serveIngestMetrics(t)
			var log brokertest.Buffer
			stop := w.ingest(t, IngestConfig{Batch: 10, Wait: 20 * time.Millisecond, Metrics: m}, &log)
			w.drained(t)
			if err := stop(); err != nil {
				t.Fatalf("Ingest after the kill: %v\n%s", err, log.String())
			}
			w.accountRows(t, n)
			scrape := scrapeMetrics(t, addr)
			for _, want := range []string{"eaimq_dlq_ingested_total 20", "eaimq_dlq_ingest_duplicates_total 10"} {
				if !strings.Contains(scrape, want+"\n") {
					t.Errorf("/metrics after the restart lacks %q:\n%s", want, scrape)
				}
			}
		})
	}
}

// TestIngestFaultSQLiteDiskFull: the SQLite store's file system fills
// while dlq ingest writes into it. Ingestion stops consuming and holds
// nothing (every dead letter not committed is back in claim.dead, ready),
// and goes on by itself once there is room; each dead letter is one row.
// (PostgreSQL's crash is TestIngestWaitsForACrashedPostgres.)
func TestIngestFaultSQLiteDiskFull(t *testing.T) {
	fsdir := t.TempDir()
	// 32 MiB: room for the 2,000 rows with their word index (FTS4) and
	// the WAL once the filler is gone; in 8 MiB the freed disk still could
	// not hold them, and ingestion stalled for good.
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", fsdir).CombinedOutput(); err != nil {
		t.Fatalf("mount a 32 MiB tmpfs for the store (the tests run as root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", fsdir).Run() })
	w := newIngestWorld(t, filepath.Join(fsdir, "processed.db"))
	const n = 2000
	w.publishDead(t, "full", n, 1024, -1)

	atTwo, filled := make(chan struct{}), make(chan struct{})
	stopped := make(chan string, 10)
	commits := 0
	filler := filepath.Join(fsdir, "filler")
	var log brokertest.Buffer
	stop := w.ingest(t, IngestConfig{Batch: 20, Wait: 20 * time.Millisecond, Retry: 100 * time.Millisecond, Hooks: IngestHooks{
		AfterCommit: func() error {
			// The disk fills after the second commit, before its ack:
			// the batches after it meet a full file system.
			if commits++; commits == 2 {
				close(atTwo)
				<-filled
			}
			return nil
		},
		Stopped: func(why string) { stopped <- why },
	}}, &log)
	select {
	case <-atTwo:
	case <-time.After(60 * time.Second):
		t.Fatalf("no second commit:\n%s", log.String())
	}
	fillFS(t, filler)
	close(filled)
	// The gate: the store failed for the full disk and ingestion stopped.
	select {
	case why := <-stopped:
		if !strings.Contains(why, "failed") || !strings.Contains(why, "stopped consuming") {
			t.Errorf("stopped: %s", why)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("ingestion did not stop for the full disk:\n%s", log.String())
	}
	var ready int
	brokertest.Eventually(t, 30*time.Second, "claim.dead holding what is not in the store, none held", func() bool {
		q := w.vh.Queues(t)[topo.DeadQueue]
		ready = q.Messages
		return q.Unacked == 0 && int64(q.Messages)+w.count(t) == n
	})
	if ready == 0 || ready == n {
		t.Fatalf("claim.dead holds %d of %d while the disk is full: the fault did not fall mid-ingest", ready, n)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	w.drained(t)
	if err := stop(); err != nil {
		t.Fatalf("Ingest: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "answers again") {
		t.Errorf("the log does not say ingestion resumed:\n%s", log.String())
	}
	w.accountRows(t, n)
	t.Logf("%d of %d dead letters waited in claim.dead while the disk was full", ready, n)
}

// TestIngestFaultPoisonAmong10000: one message that cannot be read (not
// JSON, invalid UTF-8 and NUL in its body and its message_id) in the
// middle of 10,000: it is stored as it came and flagged, and the other
// 9,999 are ingested around it.
func TestIngestFaultPoisonAmong10000(t *testing.T) {
	for _, be := range ingestBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newIngestWorld(t, be.loc(t))
			const n = 10_000
			poison := amqp.Publishing{MessageId: "poison\x00\xfe", DeliveryMode: amqp.Persistent,
				Body: []byte("\xff\x00{not json"), Headers: amqp.Table{"x-odd": []byte{0, 0xff}, "x-n": amqp.Decimal{Scale: 2, Value: 12345}}}
			w.publishDead(t, "poison", n-1, 256, n/2, poison)
			var log brokertest.Buffer
			stop := w.ingest(t, IngestConfig{Wait: 20 * time.Millisecond}, &log)
			w.drained(t)
			if err := stop(); err != nil {
				t.Fatalf("Ingest: %v\n%s", err, log.String())
			}
			rows := w.accountRows(t, n)
			var flagged []deadletter.Row
			for _, r := range rows {
				if r.Raw != "" {
					flagged = append(flagged, r)
				}
			}
			if len(flagged) != 1 || flagged[0].MessageID != poison.MessageId || !bytes.Equal(flagged[0].Body, poison.Body) {
				t.Fatalf("%d rows flagged raw, want the poison message's only, its body as it came: %+v", len(flagged), flagged)
			}
			// It sat in the middle: half the good ones were ingested
			// before it, half after.
			if p := flagged[0]; p.Seq < rows[0].Seq+n/4 || p.Seq > rows[len(rows)-1].Seq-n/4 {
				t.Errorf("the poison row's seq %d, of %d..%d: not in the middle", p.Seq, rows[0].Seq, rows[len(rows)-1].Seq)
			}
			t.Logf("poison row: raw %q", flagged[0].Raw)
		})
	}
}

// TestIngestFaultQuorumDeadLettering: topology -queue-type quorum; claims
// rejected from claim.in are dead-lettered by the broker (at-least-once),
// and a copy that at-least-once dead-lettering delivers twice (the source
// queue publishes it again when claim.dead's confirm did not reach it) is
// one row; both backends.
func TestIngestFaultQuorumDeadLettering(t *testing.T) {
	for _, be := range ingestBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newIngestWorldOf(t, be.loc(t), topo.Quorum)
			const n, twice, chunk = 40, 8, 20
			w.vh.PublishClaims(t, brokertest.Claims("qdead", "C-qdead", n, false)...)
			ch := w.vh.Channel(t)
			ds, err := ch.Consume(topo.Queue, "", false, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				select {
				case d := <-ds:
					if err := d.Reject(false /* requeue */); err != nil {
						t.Fatal(err)
					}
				case <-time.After(30 * time.Second):
					t.Fatal("claim.in delivered fewer than published")
				}
				if (i+1)%chunk == 0 {
					// RabbitMQ's at-least-once dead-lettering worker takes
					// 32 at a time (dead_letter_worker_consumer_prefetch);
					// here more rejected at once left a few in claim.in
					// for minutes (its retry): so 20 at a time, each
					// chunk dead-lettered before the next.
					brokertest.Eventually(t, 30*time.Second, "a chunk dead-lettered", func() bool {
						return w.vh.Depth(t, topo.DeadQueue) == i+1
					})
				}
			}
			ch.Close()
			brokertest.Eventually(t, 30*time.Second, "every claim dead-lettered by the broker", func() bool {
				return w.vh.Depth(t, topo.DeadQueue) == n
			})
			// The duplicates: the same copies, as the broker dead-lettered
			// them (headers with x-death, properties, body), published into
			// claim.dead again.
			ch = w.vh.Channel(t)
			if err := ch.Confirm(false); err != nil {
				t.Fatal(err)
			}
			var got []amqp.Delivery
			for range twice {
				d, ok, err := ch.Get(topo.DeadQueue, false)
				if err != nil || !ok {
					t.Fatalf("basic.get claim.dead: %v %v", ok, err)
				}
				if _, ok := d.Headers["x-death"]; !ok {
					t.Fatalf("a dead letter without x-death: %v", d.Headers)
				}
				got = append(got, d)
				dc, err := ch.PublishWithDeferredConfirm("", topo.DeadQueue, true, false, amqp.Publishing{Headers: d.Headers,
					ContentType: d.ContentType, DeliveryMode: d.DeliveryMode, MessageId: d.MessageId, Timestamp: d.Timestamp,
					Type: d.Type, AppId: d.AppId, CorrelationId: d.CorrelationId, Body: d.Body})
				if err != nil || !dc.Wait() {
					t.Fatalf("publish the copy again: %v", err)
				}
			}
			for _, d := range got {
				d.Nack(false, true /* requeue */)
			}
			ch.Close()
			brokertest.Eventually(t, 30*time.Second, "claim.dead holding each once and 8 twice", func() bool {
				q := w.vh.Queues(t)[topo.DeadQueue]
				return q.Messages == n+twice && q.Unacked == 0
			})
			m, addr := serveIngestMetrics(t)
			var log brokertest.Buffer
			stop := w.ingest(t, IngestConfig{Batch: 7, Wait: 20 * time.Millisecond, Metrics: m}, &log)
			w.drained(t)
			if err := stop(); err != nil {
				t.Fatalf("Ingest: %v\n%s", err, log.String())
			}
			for _, r := range w.accountRows(t, n) {
				if r.BrokerReason != "rejected" || r.DeadAt.IsZero() {
					t.Errorf("row of %s: x-death reason %q at %v, want the broker's rejected", r.MessageID, r.BrokerReason, r.DeadAt)
				}
			}
			scrape := scrapeMetrics(t, addr)
			for _, want := range []string{fmt.Sprintf("eaimq_dlq_ingested_total %d", n), fmt.Sprintf("eaimq_dlq_ingest_duplicates_total %d", twice)} {
				if !strings.Contains(scrape, want+"\n") {
					t.Errorf("/metrics lacks %q:\n%s", want, scrape)
				}
			}
		})
	}
}

// accountRows checks that the table holds n rows, one per dead letter (no
// message_id twice), and returns them.
func (w *ingestWorld) accountRows(t *testing.T, n int) []deadletter.Row {
	t.Helper()
	rows := w.rows(t, deadletter.Query{})
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.MessageID]++
	}
	twice := 0
	for id, k := range seen {
		if k > 1 {
			twice++
			if twice <= 5 {
				t.Errorf("%s: %d rows", id, k)
			}
		}
	}
	if len(rows) != n || len(seen) != n {
		t.Errorf("%d rows of %d dead letters, want %d each (lost %d, with a second row %d)", len(rows), len(seen), n, n-len(seen), twice)
	}
	return rows
}

func (w *ingestWorld) count(t *testing.T) int64 {
	t.Helper()
	n, err := w.dl.CountDeadLetters(context.Background(), deadletter.Query{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// publishDead puts n dead letters with bodies of about size bytes into
// claim.dead, confirmed in windows of 500 (DeadLetter waits for each
// confirm: too slow for thousands); extra are published after the first
// at of them (at < 0: none).
func (w *ingestWorld) publishDead(t *testing.T, prefix string, n, size, at int, extra ...amqp.Publishing) {
	t.Helper()
	ch := w.vh.Channel(t)
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	when := time.Now().Truncate(time.Second)
	pad := strings.Repeat("x", max(0, size-120))
	var pending []*amqp.DeferredConfirmation
	publish := func(m amqp.Publishing) {
		dc, err := ch.PublishWithDeferredConfirm("", topo.DeadQueue, true /* mandatory */, false, m)
		if err != nil {
			t.Fatal(err)
		}
		if pending = append(pending, dc); len(pending) == 500 {
			settle(t, pending)
			pending = pending[:0]
		}
	}
	for i := range n {
		if i == at {
			for _, m := range extra {
				publish(m)
			}
		}
		id := fmt.Sprintf("%s-%05d", prefix, i)
		publish(amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, ContentType: "application/json",
			Body: fmt.Appendf(nil, `{"guid":%q,"claimId":"C-%s","docs":[],"pad":%q}`, id, id, pad),
			Headers: amqp.Table{"x-death": []any{amqp.Table{"queue": topo.Queue, "reason": "rejected", "count": int64(1), "time": when,
				"exchange": "eai.claim", "routing-keys": []any{"claim"}}}}})
	}
	settle(t, pending)
	total := n
	if at >= 0 {
		total += len(extra)
	}
	brokertest.Eventually(t, 30*time.Second, "dead letters queued", func() bool {
		return w.vh.Depth(t, topo.DeadQueue) == total
	})
}

func settle(t *testing.T, dcs []*amqp.DeferredConfirmation) {
	t.Helper()
	for _, dc := range dcs {
		if !dc.Wait() {
			t.Fatal("nacked")
		}
	}
}

func serveIngestMetrics(t *testing.T) (*metrics.Ingest, string) {
	t.Helper()
	m := metrics.NewIngest()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr, err := m.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return m, addr
}

// fillFS writes to path until its file system is full.
func fillFS(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !strings.Contains(err.Error(), syscall.ENOSPC.Error()) {
				t.Fatalf("fill the file system: %v", err)
			}
			// A few bytes may remain below 64 KiB: take them too.
			for _, k := range []int{4096, 512, 1} {
				for {
					if _, err := f.Write(buf[:k]); err != nil {
						break
					}
				}
			}
			return
		}
	}
}
