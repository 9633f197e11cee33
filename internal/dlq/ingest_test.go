package dlq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/claim"
	"eaimq/internal/fail"
	"eaimq/internal/metrics"
	"eaimq/internal/pgtest"
	"eaimq/internal/store"
	"eaimq/internal/store/deadletter"
	"eaimq/internal/topo"
)

// ingestBackends are the two stores dlq ingest writes into: a temporary
// SQLite file and a temporary PostgreSQL database.
var ingestBackends = []struct {
	name string
	loc  func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "processed.db") }},
	{"postgres", func(t *testing.T) string { return pgtest.New(t) }},
}

// ingestWorld is a vhost with the topology and a store, for one backend.
type ingestWorld struct {
	vh  *brokertest.VHost
	loc string
	st  store.Store
	dl  store.DeadLetters
}

func newIngestWorld(t *testing.T, loc string) *ingestWorld {
	return newIngestWorldOf(t, loc, topo.Classic)
}

// newIngestWorldOf is newIngestWorld with queues of type qt.
func newIngestWorldOf(t *testing.T, loc string, qt topo.QueueType) *ingestWorld {
	vh := brokertest.New(t)
	conn := vh.Dial(t)
	if err := topo.DeclareFor(conn, qt); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	st, err := store.Open(loc, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	dl, ok := store.DeadLettersOf(st)
	if !ok {
		t.Fatal("the store has no table of dead letters")
	}
	return &ingestWorld{vh: vh, loc: loc, st: st, dl: dl}
}

// deadLetters puts n dead letters in claim.dead, as the broker leaves
// them: an x-death header each.
func (w *ingestWorld) deadLetters(t *testing.T, prefix string, n int) []amqp.Publishing {
	at := time.Now().Truncate(time.Second)
	msgs := make([]amqp.Publishing, n)
	for i := range msgs {
		id := fmt.Sprintf("%s-%03d", prefix, i)
		msgs[i] = amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, ContentType: "application/json",
			Body: brokertest.Claim(id, "C-"+id),
			Headers: amqp.Table{"x-death": []any{amqp.Table{"queue": topo.Queue, "reason": "rejected", "count": int64(1), "time": at,
				"exchange": "eai.claim", "routing-keys": []any{"claim"}}}}}
	}
	w.vh.DeadLetter(t, msgs...)
	return msgs
}

// ingest runs Ingest until the returned stop is called; stop returns
// Ingest's error.
func (w *ingestWorld) ingest(t *testing.T, c IngestConfig, log *brokertest.Buffer) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Ingest(ctx, w.vh.Getenv(nil), w.st, c, log) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

func (w *ingestWorld) rows(t *testing.T, q deadletter.Query) []deadletter.Row {
	t.Helper()
	rows, err := w.dl.DeadLetters(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// drained waits until claim.dead holds nothing, ready or unacked.
func (w *ingestWorld) drained(t *testing.T) {
	t.Helper()
	// A liveness wait, not a speed test: generous, for the suite's -race
	// on a loaded machine.
	brokertest.Eventually(t, 2*time.Minute, "claim.dead empty, nothing unacked", func() bool {
		q := w.vh.Queues(t)[topo.DeadQueue]
		return q.Messages == 0 && q.Unacked == 0
	})
}

// TestIngestKeepsEveryDeadLetterOnce: ingestion writes a row for each dead
// letter, with what the consumer recorded, acks them all, keeps the same
// copy dead-lettered twice as one row, and stores a message it cannot read
// raw and flagged without stalling the rest; list and show then read the
// rows, the same model as the queue's.
func TestIngestKeepsEveryDeadLetterOnce(t *testing.T) {
	for _, be := range ingestBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newIngestWorld(t, be.loc(t))
			ctx := context.Background()
			// The consumer's record of one of them: a 422.
			if _, err := w.st.Begin(ctx, "ing-007", claim.Copy{ClaimID: "C-ing-007", Fresh: true}, time.Minute); err != nil {
				t.Fatal(err)
			}
			if _, err := w.st.Finish(ctx, "ing-007", claim.Attempt{At: time.Now(), Status: 422, Error: "documents missing",
				Outcome: claim.OutRejected, Detail: "rejected by the claim system", Called: true}); err != nil {
				t.Fatal(err)
			}
			msgs := w.deadLetters(t, "ing", 40)
			// The same copy again (the broker's at-least-once
			// dead-lettering), and a poison message among them.
			poison := amqp.Publishing{MessageId: "poison\x00\xfe", Body: []byte("\xff{not json")}
			w.vh.DeadLetter(t, msgs[3], poison)
			w.deadLetters(t, "late", 5)

			var log brokertest.Buffer
			stop := w.ingest(t, IngestConfig{Batch: 8, Wait: 20 * time.Millisecond}, &log)
			w.drained(t)
			if err := stop(); err != nil {
				t.Fatalf("Ingest: %v\n%s", err, log.String())
			}
			rows := w.rows(t, deadletter.Query{})
			if len(rows) != 46 {
				t.Fatalf("%d rows, want 46 (40 + 5 + the poison; the copy dead-lettered twice once)", len(rows))
			}
			byID := map[string]deadletter.Row{}
			for _, r := range rows {
				if _, dup := byID[r.MessageID]; dup {
					t.Errorf("two rows of %q", r.MessageID)
				}
				byID[r.MessageID] = r
			}
			p, ok := byID["poison\x00\xfe"]
			if !ok || p.Raw == "" || !bytes.Equal(p.Body, poison.Body) {
				t.Errorf("the poison message's row: %+v (found %v)", p, ok)
			}
			if r := byID["ing-007"]; r.Reason != "rejected" || r.Status != 422 || r.Attempts != 1 || r.Answer != "documents missing" || r.Raw != "" {
				t.Errorf("the recorded claim's row: reason %q status %d attempts %d answer %q raw %q", r.Reason, r.Status, r.Attempts, r.Answer, r.Raw)
			}
			if r := byID["ing-001"]; r.Reason != "unknown" || r.ClaimID != "C-ing-001" || r.GUID != "ing-001" || r.BrokerReason != "rejected" || r.DeadAt.IsZero() {
				t.Errorf("an unrecorded claim's row: %+v", r)
			}

			// list and show read the rows.
			conn := w.vh.Dial(t)
			b, err := NewIngestedBrowser(conn, w.st)
			if err != nil {
				t.Fatal(err)
			}
			ms, wk := walkSelected(t, b, Config{Reason: claim.Rejected, ByReason: true})
			b.Close()
			if keys := keysOf(ms); len(keys) != 1 || keys[0] != "ing-007" || wk.Looked != 1 || !b.Rows() || wk.Source != IngestedSource {
				t.Errorf("list -reason rejected: %q, walked %+v", keys, wk)
			}
			b, err = NewIngestedBrowser(conn, w.st)
			if err != nil {
				t.Fatal(err)
			}
			m, err := FindOne(ctx, b, Config{IDs: []string{"C-ing-007"}})
			if err != nil {
				t.Fatal(err)
			}
			b.Close()
			deaths, _ := m.Delivery().Headers["x-death"].([]any)
			if m.Key != "ing-007" || m.Delivery().MessageId != "ing-007" || len(deaths) != 1 || m.Count != 1 ||
				m.Why() != "rejected: rejected by the claim system" || !m.Known || m.Rec.LastStatus != 422 {
				t.Errorf("show C-ing-007: key %q, x-death %v, count %d, why %q, record %v %+v", m.Key, deaths, m.Count, m.Why(), m.Known, m.Rec)
			}
			as, err := w.st.Attempts(ctx, m.Key)
			if err != nil || len(as) == 0 || as[len(as)-1].Status != 422 {
				t.Errorf("show C-ing-007's attempts: %+v, %v", as, err)
			}
		})
	}
}

// TestIngestRecognisesACrashBetweenCommitAndAck: a batch committed and
// not acked (the process dies between the two) comes back from the
// broker, and the next run acks it without a second row; on a quorum
// claim.dead too, where the copy comes back with x-delivery-count raised.
func TestIngestRecognisesACrashBetweenCommitAndAck(t *testing.T) {
	cases := []struct {
		name string
		loc  func(t *testing.T) string
		qt   topo.QueueType
	}{
		{ingestBackends[0].name, ingestBackends[0].loc, topo.Classic},
		{ingestBackends[1].name, ingestBackends[1].loc, topo.Classic},
		{ingestBackends[0].name + "-quorum", ingestBackends[0].loc, topo.Quorum},
	}
	for _, be := range cases {
		t.Run(be.name, func(t *testing.T) {
			w := newIngestWorldOf(t, be.loc(t), be.qt)
			w.deadLetters(t, "crash", 30)
			errCrash := errors.New("killed between commit and ack")
			var log brokertest.Buffer
			stop := w.ingest(t, IngestConfig{Batch: 10, Wait: 20 * time.Millisecond,
				Hooks: IngestHooks{AfterCommit: func() error { return errCrash }}}, &log)
			brokertest.Eventually(t, 30*time.Second, "the first batch committed", func() bool {
				return len(w.rows(t, deadletter.Query{})) == 10
			})
			if err := stop(); !errors.Is(err, errCrash) {
				t.Fatalf("Ingest: %v, want the crash", err)
			}
			// Its connection closed: the committed batch is back too.
			brokertest.Eventually(t, 30*time.Second, "claim.dead holding all 30 again", func() bool {
				q := w.vh.Queues(t)[topo.DeadQueue]
				return q.Messages == 30 && q.Unacked == 0
			})
			m := metrics.NewIngest()
			mctx, mstop := context.WithCancel(context.Background())
			defer mstop()
			addr, err := m.Serve(mctx, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			stop = w.ingest(t, IngestConfig{Batch: 10, Wait: 20 * time.Millisecond, Metrics: m}, &log)
			w.drained(t)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if n := len(w.rows(t, deadletter.Query{})); n != 30 {
				t.Errorf("%d rows after the restart, want 30: the redelivered batch was written again", n)
			}
			scrape := scrapeMetrics(t, addr)
			for _, want := range []string{"eaimq_dlq_ingested_total 20", "eaimq_dlq_ingest_duplicates_total 10", "eaimq_dlq_ingested_rows 30"} {
				if !strings.Contains(scrape, want+"\n") {
					t.Errorf("/metrics after the restart lacks %q:\n%s", want, scrape)
				}
			}
		})
	}
}

// TestIngestDrainsOnSignal: when ctx ends (SIGTERM), the batch in hand is
// committed and acked, and Ingest returns nil.
func TestIngestDrainsOnSignal(t *testing.T) {
	for _, be := range ingestBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newIngestWorld(t, be.loc(t))
			const n = 25
			w.deadLetters(t, "term", n)
			all := make(chan struct{})
			var once sync.Once
			var log brokertest.Buffer
			// A batch larger than claim.dead, and a wait longer than the
			// test: only the signal ends it.
			stop := w.ingest(t, IngestConfig{Batch: 1000, Wait: time.Hour, Hooks: IngestHooks{Taken: func(k int) {
				if k == n {
					once.Do(func() { close(all) })
				}
			}}}, &log)
			select {
			case <-all:
			case <-time.After(30 * time.Second):
				t.Fatal("the ingester never held all 25")
			}
			if rows := len(w.rows(t, deadletter.Query{})); rows != 0 {
				t.Fatalf("%d rows before the signal: the batch was written early", rows)
			}
			if err := stop(); err != nil {
				t.Fatalf("Ingest after the signal: %v", err)
			}
			if rows := len(w.rows(t, deadletter.Query{})); rows != n {
				t.Errorf("%d rows after the signal, want %d", rows, n)
			}
			w.drained(t)
		})
	}
}

// TestIngestStopsAtMaxRows: at the size bound ingestion stops taking
// more, says so, and holds nothing: claim.dead keeps the rest, ready.
func TestIngestStopsAtMaxRows(t *testing.T) {
	for _, be := range ingestBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newIngestWorld(t, be.loc(t))
			w.deadLetters(t, "full", 30)
			stopped := make(chan string, 1)
			var log brokertest.Buffer
			m := metrics.NewIngest()
			mctx, mstop := context.WithCancel(context.Background())
			defer mstop()
			addr, err := m.Serve(mctx, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			stop := w.ingest(t, IngestConfig{Batch: 5, MaxRows: 12, Wait: 20 * time.Millisecond, Metrics: m,
				Hooks: IngestHooks{Stopped: func(why string) { stopped <- why }}}, &log)
			select {
			case why := <-stopped:
				if !strings.Contains(why, "at -max-rows 12: stopped taking more") {
					t.Errorf("stopped: %s", why)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("never stopped at -max-rows:\n%s", log.String())
			}
			if n := len(w.rows(t, deadletter.Query{})); n != 12 {
				t.Errorf("%d rows, want 12", n)
			}
			brokertest.Eventually(t, 30*time.Second, "claim.dead keeping 18, none held", func() bool {
				q := w.vh.Queues(t)[topo.DeadQueue]
				return q.Messages == 18 && q.Unacked == 0
			})
			scrape := scrapeMetrics(t, addr)
			for _, want := range []string{`eaimq_dlq_ingest_stopped{reason="full"} 1`, `eaimq_dlq_ingest_stopped{reason="store"} 0`,
				"eaimq_dlq_ingested_rows 12", "eaimq_dlq_ingest_max_rows 12", "eaimq_dlq_ingested_total 12", "eaimq_dlq_ingest_duplicates_total 0"} {
				if !strings.Contains(scrape, want+"\n") {
					t.Errorf("/metrics at the bound lacks %q:\n%s", want, scrape)
				}
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(log.String(), "dlq ingest: 12 dead letter(s) in the store, at -max-rows 12") {
				t.Errorf("log:\n%s", log.String())
			}

			// A run that starts at the bound says so at once, and takes
			// nothing.
			var log2 brokertest.Buffer
			stop = w.ingest(t, IngestConfig{Batch: 5, MaxRows: 12, Wait: 20 * time.Millisecond,
				Hooks: IngestHooks{Stopped: func(why string) { stopped <- why }}}, &log2)
			select {
			case why := <-stopped:
				if !strings.Contains(why, "12 dead letter(s) in the store, at -max-rows 12: stopped taking more") {
					t.Errorf("stopped at start: %s", why)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("a run at the bound did not say so:\n%s", log2.String())
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if q := w.vh.Queues(t)[topo.DeadQueue]; q.Messages != 18 || q.Unacked != 0 {
				t.Errorf("after a run at the bound claim.dead holds %d ready, %d unacked; want 18 and 0", q.Messages, q.Unacked)
			}
		})
	}
}

// TestIngestWaitsForACrashedPostgres: PostgreSQL crashing under ingestion
// stops the consuming: every dead letter not committed goes back to
// claim.dead, nothing is held, nothing acked without its row; when the
// server is back ingestion resumes, and the batch whose commit the crash
// may have cut is one row each.
func TestIngestWaitsForACrashedPostgres(t *testing.T) {
	srv := pgtest.PrivateServer(t)
	w := newIngestWorld(t, srv.URL)
	const n = 200
	w.deadLetters(t, "pgcrash", n)
	atTwo, crashed := make(chan struct{}), make(chan struct{})
	stopped := make(chan string, 10)
	commits := 0
	var log brokertest.Buffer
	stop := w.ingest(t, IngestConfig{Batch: 5, Wait: 20 * time.Millisecond, Retry: 100 * time.Millisecond, Hooks: IngestHooks{
		AfterCommit: func() error {
			// The crash comes after the second commit, before its ack:
			// that batch is acked, the next one meets a dead server.
			if commits++; commits == 2 {
				close(atTwo)
				<-crashed
			}
			return nil
		},
		Stopped: func(why string) { stopped <- why },
	}}, &log)
	select {
	case <-atTwo:
	case <-time.After(30 * time.Second):
		t.Fatalf("no second commit:\n%s", log.String())
	}
	srv.Crash(t)
	close(crashed)
	select {
	case why := <-stopped:
		if !strings.Contains(why, "failed") || !strings.Contains(why, "stopped consuming") {
			t.Errorf("stopped: %s", why)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("ingestion did not stop for the crashed store:\n%s", log.String())
	}
	brokertest.Eventually(t, 30*time.Second, "claim.dead holding all but the 10 acked, none held", func() bool {
		q := w.vh.Queues(t)[topo.DeadQueue]
		return q.Messages == n-10 && q.Unacked == 0
	})
	srv.Start(t)
	w.drained(t)
	if err := stop(); err != nil {
		t.Fatalf("Ingest: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "answers again") {
		t.Errorf("the log does not say ingestion resumed:\n%s", log.String())
	}
	rows := w.rows(t, deadletter.Query{})
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r.MessageID] = true
	}
	if len(rows) != n || len(seen) != n {
		t.Errorf("%d rows of %d dead letters after the crash, want %d each", len(rows), len(seen), n)
	}
}

func scrapeMetrics(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// TestIngestSessionOpeningIsBounded: a node that takes the connection and
// then answers nothing on a channel (its heartbeats go on) does not hold
// dlq ingest, a service: the session's opening gives up after the dial's
// timeout (10 s) and Ingest returns unavailable, naming the stall, for the
// service manager to restart it, rather than waiting for ever. Nothing is
// taken, so nothing is held.
func TestIngestSessionOpeningIsBounded(t *testing.T) {
	w := newIngestWorld(t, ingestBackends[0].loc(t))
	w.deadLetters(t, "stall", 3)
	url, stalled := brokertest.StallAfterHandshake(t, w.vh.URL)
	getenv := w.vh.Getenv(nil)
	done := make(chan error, 1)
	start := time.Now()
	var log brokertest.Buffer
	go func() {
		done <- Ingest(context.Background(), func(k string) string {
			if k == broker.EnvURL {
				return url
			}
			return getenv(k)
		}, w.st, IngestConfig{Batch: 10, Wait: 20 * time.Millisecond}, &log)
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(40 * time.Second):
		t.Fatalf("dlq ingest still opening its session 40 s after it started:\n%s", log.String())
	}
	select {
	case <-stalled:
	default:
		t.Fatalf("no frame was kept from the broker: the stall did not happen (%v)", err)
	}
	if fail.Of(err) != fail.Unavailable || !strings.Contains(fmt.Sprint(err), "did not open the session within 10s") {
		t.Errorf("Ingest ended with %v after %s; want unavailable, naming the stall", err, time.Since(start))
	}
	if rows := len(w.rows(t, deadletter.Query{})); rows != 0 {
		t.Errorf("%d rows from a session that never opened", rows)
	}
	q := w.vh.Queues(t)[topo.DeadQueue]
	if q.Messages != 3 || q.Unacked != 0 {
		t.Errorf("claim.dead holds %d ready, %d unacked; want the 3 ready", q.Messages, q.Unacked)
	}
}
