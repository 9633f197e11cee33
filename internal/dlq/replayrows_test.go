package dlq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/store"
	"eaimq/internal/store/deadletter"
	"eaimq/internal/topo"
)

// putRows writes n ingested dead letters straight into the world's
// table, as dlq ingest would have (rowOf over what claim.dead held), each
// with documents, so that the partner takes a replay of it: claim.dead
// itself stays empty.
func (w *ingestWorld) putRows(t *testing.T, prefix string, n int) []deadletter.Row {
	t.Helper()
	at := time.Now().Truncate(time.Second)
	rows := make([]deadletter.Row, n)
	for i := range rows {
		id := fmt.Sprintf("%s-%03d", prefix, i)
		d := amqp.Delivery{MessageId: id, DeliveryMode: amqp.Persistent, ContentType: "application/json",
			Body: brokertest.Claim(id, "C-"+id, "r.pdf"),
			Headers: amqp.Table{"x-death": []any{amqp.Table{"queue": topo.Queue, "reason": "rejected", "count": int64(1), "time": at,
				"exchange": "eai.claim", "routing-keys": []any{"claim"}}}}}
		rows[i] = rowOf(parse(d, false), time.Now().UTC())
	}
	if _, err := w.dl.PutDeadLetters(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	return w.rows(t, deadletter.Query{})[len(w.rows(t, deadletter.Query{}))-n:]
}

// row reads the one row of message_id id.
func (w *ingestWorld) row(t *testing.T, id string) deadletter.Row {
	t.Helper()
	rows := w.rows(t, deadletter.Query{IDs: []string{id}})
	if len(rows) != 1 {
		t.Fatalf("%d rows of %s, want 1", len(rows), id)
	}
	return rows[0]
}

// replayRows runs the replay command over the world's ingested rows, on a
// connection and a store handle of its own, as another process would.
func (w *ingestWorld) replayRows(t *testing.T, c Config) (tally string, out string, err error) {
	t.Helper()
	st, err := store.Open(w.loc, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	conn := w.vh.Dial(t)
	defer conn.Close()
	b, err := NewIngestedBrowser(conn, st)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if c.MaxReplays == 0 {
		c.MaxReplays = DefaultMaxReplays
	}
	if c.Actor == (Actor{}) {
		c.Actor = Actor{Who: "tester", Via: "dlq replay"}
	}
	var stdout, stderr bytes.Buffer
	err = Replay(context.Background(), b, c, &stdout, &stderr)
	return stdout.String(), stdout.String() + stderr.String(), err
}

// TestReplayRowsOnce: a replay over ingested rows claims each row, sends
// its copy to eai.claim confirmed, then marks it replayed with who and
// through what; a second replay of the replayed row sends nothing; a
// bulk replay fixes its selection at its start.
func TestReplayRowsOnce(t *testing.T) {
	for _, be := range ingestBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newIngestWorld(t, be.loc(t))
			w.putRows(t, "rr", 3)

			_, out, err := w.replayRows(t, Config{IDs: []string{"C-rr-001"}})
			if err != nil {
				t.Fatalf("replay C-rr-001: %v\n%s", err, out)
			}
			if !strings.Contains(out, "replayed rr-001") {
				t.Errorf("replay's output:\n%s", out)
			}
			if n := w.vh.Depth(t, topo.Queue); n != 1 {
				t.Fatalf("claim.in holds %d, want the one copy", n)
			}
			r := w.row(t, "rr-001")
			if r.State != deadletter.StateReplayed || r.StateBy != "tester" || r.StateVia != "dlq replay" || r.StateAt.IsZero() {
				t.Errorf("the replayed row: state %q by %q via %q at %v", r.State, r.StateBy, r.StateVia, r.StateAt)
			}

			// Again: the row is not dead any more, and nothing is sent.
			_, out, err = w.replayRows(t, Config{IDs: []string{"rr-001"}, Force: true})
			if err == nil || !strings.Contains(out, "no dead letter with id or claimId") {
				t.Errorf("a second replay of the replayed row: err %v\n%s", err, out)
			}
			if n := w.vh.Depth(t, topo.Queue); n != 1 {
				t.Fatalf("claim.in holds %d after the second replay, want still 1", n)
			}

			// A bulk replay whose selection is fixed at its start: a row
			// ingested while it runs (after its first copy is out) is
			// not swept in.
			var once sync.Once
			c := Config{Reason: 0, Rate: 0}
			c.Hooks.AfterConfirm = func() error {
				once.Do(func() { w.putRows(t, "late", 1) })
				return nil
			}
			c.Hooks.BeforeClaim = nil
			_, out, err = w.replayRowsAll(t, c)
			if err != nil {
				t.Fatalf("replay all: %v\n%s", err, out)
			}
			if n := w.vh.Depth(t, topo.Queue); n != 3 {
				t.Errorf("claim.in holds %d, want 3 (the two left, and the first): %s", n, out)
			}
			if r := w.row(t, "late-000"); r.State != deadletter.StateDead {
				t.Errorf("the row ingested during the bulk replay is %q, want dead (not swept in)", r.State)
			}
		})
	}
}

// replayRowsAll is replayRows of every row, paced at one a millisecond
// in batches of one, so that the hook runs after the first copy.
func (w *ingestWorld) replayRowsAll(t *testing.T, c Config) (string, string, error) {
	c.Rate = 1000
	return w.replayRows(t, c)
}

// TestReplayRowsConcurrentSendOnce: two replays of one row, in two
// processes' stead (each its own connection and store handle), both read
// it as dead and both try to claim it (a gate holds each until the
// other has read it too): the database lets one of them, and the copy is
// sent once.
func TestReplayRowsConcurrentSendOnce(t *testing.T) {
	for _, be := range ingestBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newIngestWorld(t, be.loc(t))
			w.putRows(t, "cc", 1)
			var arrived sync.WaitGroup
			arrived.Add(2)
			gate := func() { arrived.Done(); arrived.Wait() } // both have read the row as dead
			type result struct {
				tally, out string
				err        error
			}
			results := make(chan result, 2)
			for _, who := range []string{"cli", "page"} {
				go func() {
					c := Config{IDs: []string{"cc-000"}, Actor: Actor{Who: who, Via: "dlq replay"}}
					c.Hooks.BeforeClaim = gate
					tally, out, err := w.replayRows(t, c)
					results <- result{tally, out, err}
				}()
			}
			var outs []string
			replayed, taken := 0, 0
			for range 2 {
				r := <-results
				outs = append(outs, r.out)
				if strings.Contains(r.out, "replayed cc-000") {
					replayed++
				}
				if strings.Contains(r.out, "another replay took it first") {
					taken++
				}
			}
			if replayed != 1 || taken != 1 {
				t.Errorf("%d replayed it and %d found it taken, want 1 and 1:\n%s", replayed, taken, strings.Join(outs, "\n---\n"))
			}
			if n := w.vh.Depth(t, topo.Queue); n != 1 {
				t.Errorf("claim.in holds %d copies, want 1", n)
			}
			if r := w.row(t, "cc-000"); r.State != deadletter.StateReplayed {
				t.Errorf("the row is %q, want replayed", r.State)
			}
		})
	}
}

// TestReplayRowsCrashBetweenConfirmAndMark: a replay that dies after the
// broker confirmed its copy and before the row is marked leaves the row
// replaying. A plain replay then sends nothing (its copy may be out);
// replay -force after the lease sends it again: one extra publish, which
// the consumer's dedup absorbs, so the partner is called once.
func TestReplayRowsCrashBetweenConfirmAndMark(t *testing.T) {
	for _, be := range ingestBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newIngestWorld(t, be.loc(t))
			w.putRows(t, "kk", 1)
			crash := errors.New("killed between the confirm and the mark")
			crashed := false
			c := Config{IDs: []string{"kk-000"}}
			c.Hooks.AfterConfirm = func() error { crashed = true; return crash }
			_, out, err := w.replayRows(t, c)
			if !crashed || !errors.Is(err, crash) {
				t.Fatalf("the replay did not stop between the confirm and the mark: crashed %v, err %v\n%s", crashed, err, out)
			}
			if n := w.vh.Depth(t, topo.Queue); n != 1 {
				t.Fatalf("claim.in holds %d, want the confirmed copy", n)
			}
			if r := w.row(t, "kk-000"); r.State != deadletter.StateReplaying {
				t.Fatalf("the row is %q after the crash, want replaying", r.State)
			}

			// list and show say it is replaying, and since when.
			st, conn := w.st, w.vh.Dial(t)
			for _, show := range []bool{false, true} {
				b, err := NewIngestedBrowser(conn, st)
				if err != nil {
					t.Fatal(err)
				}
				var m *Dead
				if show {
					m, err = FindOne(context.Background(), b, Config{IDs: []string{"kk-000"}})
				} else if ms, _ := walkSelected(t, b, Config{}); len(ms) == 1 {
					m = ms[0]
				}
				b.Close()
				if err != nil || m == nil || m.Replaying == nil || m.Replaying.By != "tester" || m.Replaying.At.IsZero() {
					t.Errorf("show %v of the row left replaying: %v, %+v", show, err, m)
				}
			}

			// A replay without -force leaves it: its copy is out.
			_, out, err = w.replayRows(t, Config{IDs: []string{"kk-000"}})
			if err != nil || !strings.Contains(out, "skipped kk-000: replaying since") {
				t.Errorf("replay of the row left replaying: %v\n%s", err, out)
			}
			if n := w.vh.Depth(t, topo.Queue); n != 1 {
				t.Fatalf("claim.in holds %d, want still 1", n)
			}

			// -force past the lease: the one extra publish.
			_, out, err = w.replayRows(t, Config{IDs: []string{"kk-000"}, Force: true, ReplayLease: time.Nanosecond})
			if err != nil || !strings.Contains(out, "replayed kk-000") {
				t.Fatalf("replay -force of the row left replaying: %v\n%s", err, out)
			}
			if n := w.vh.Depth(t, topo.Queue); n != 2 {
				t.Fatalf("claim.in holds %d, want 2 (the copy and the one extra)", n)
			}
			if r := w.row(t, "kk-000"); r.State != deadletter.StateReplayed {
				t.Errorf("the row is %q, want replayed", r.State)
			}

			// The consumer takes both copies; its dedup record absorbs
			// the second, and the partner is called once.
			p := claimsys.New()
			srv := httptest.NewServer(p)
			defer srv.Close()
			runConsumer(t, w.vh, srv.URL, w.loc)
			if !w.vh.Drained(t) {
				t.Fatalf("claim.in not drained: %+v", w.vh.Queues(t)[topo.Queue])
			}
			if n := p.Stats().ByGuid["kk-000"]; n != 1 {
				t.Errorf("the partner was called %d times for kk-000, want once", n)
			}
		})
	}
}

// runConsumer runs the consumer binary against the claim system at url,
// over the store at loc, for two seconds.
func runConsumer(t *testing.T, vh *brokertest.VHost, url, loc string) {
	t.Helper()
	cmd := exec.Command(brokertest.Binary(t, "eaimq/consumer"), "--claim", url, "--max-seconds", "2", "--log-level", "warn")
	cmd.Env = append(os.Environ(), broker.EnvURL+"="+vh.URL, store.EnvPath+"="+loc)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("consumer: %v\n%s", err, out)
	}
}

// TestPurgeRestoreRowsAndRetention: over ingested rows purge is a state
// (the row kept as the archive, which list -archive reads), restore
// brings it back, the ingester prunes what was purged longer than the
// retention ago, and dlq ingest -archive-queue takes claim.dead.archive's
// messages into rows as purged, once, and returns when it is empty.
func TestPurgeRestoreRowsAndRetention(t *testing.T) {
	for _, be := range ingestBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newIngestWorld(t, be.loc(t))
			w.putRows(t, "pp", 3)
			ctx := context.Background()
			actor := Actor{Who: "ann", Via: "dlq purge"}
			conn := w.vh.Dial(t)
			act := func(newB func(*amqp.Connection, store.Store) (*Browser, error), f func(b *Browser, out, errb *bytes.Buffer) error) string {
				t.Helper()
				b, err := newB(conn, w.st)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				var out, errb bytes.Buffer
				if err := f(b, &out, &errb); err != nil {
					t.Fatalf("%v\n%s%s", err, out.String(), errb.String())
				}
				return out.String() + errb.String()
			}
			out := act(NewIngestedBrowser, func(b *Browser, o, e *bytes.Buffer) error {
				return Purge(ctx, b, Config{IDs: []string{"C-pp-001"}, Yes: true, Actor: actor}, o, e)
			})
			if !strings.Contains(out, "archived pp-001") {
				t.Errorf("purge:\n%s", out)
			}
			var purged *Dead
			act(NewIngestedArchiveBrowser, func(b *Browser, o, e *bytes.Buffer) (err error) {
				purged, err = FindOne(ctx, b, Config{IDs: []string{"pp-001"}, Archive: true})
				return err
			})
			if p := purged.Purged; p == nil || p.By != "ann" || p.Via != "dlq purge" || purged.Archive() != IngestedArchive {
				t.Errorf("show -archive of the purged row: purged %+v, in %q", p, purged.Archive())
			}
			if r := w.row(t, "pp-001"); r.State != deadletter.StatePurged || r.StateBy != "ann" || r.StateVia != "dlq purge" {
				t.Errorf("the purged row: %q by %q via %q", r.State, r.StateBy, r.StateVia)
			}
			var keys []string
			act(NewIngestedBrowser, func(b *Browser, o, e *bytes.Buffer) error {
				ms, _ := walkSelected(t, b, Config{})
				keys = keysOf(ms)
				return nil
			})
			if slices.Contains(keys, "pp-001") || len(keys) != 2 {
				t.Errorf("list after the purge: %q", keys)
			}
			act(NewIngestedArchiveBrowser, func(b *Browser, o, e *bytes.Buffer) error {
				ms, _ := walkSelected(t, b, Config{Archive: true})
				keys = keysOf(ms)
				return nil
			})
			if len(keys) != 1 || keys[0] != "pp-001" {
				t.Errorf("list -archive: %q", keys)
			}
			out = act(NewIngestedArchiveBrowser, func(b *Browser, o, e *bytes.Buffer) error {
				return Restore(ctx, b, Config{IDs: []string{"pp-001"}, Actor: Actor{Who: "bob", Via: "dlq restore"}}, o, e)
			})
			if r := w.row(t, "pp-001"); !strings.Contains(out, "restored pp-001") || r.State != deadletter.StateDead || r.StateBy != "bob" {
				t.Errorf("restore: the row is %q by %q\n%s", r.State, r.StateBy, out)
			}
			// A second purge of a row purged already changes nothing.
			act(NewIngestedBrowser, func(b *Browser, o, e *bytes.Buffer) error {
				return Purge(ctx, b, Config{IDs: []string{"pp-002"}, Yes: true, Actor: actor}, o, e)
			})

			// The retention: the ingester prunes pp-002 at its start.
			var log brokertest.Buffer
			stop := w.ingest(t, IngestConfig{Retention: time.Nanosecond, Wait: 20 * time.Millisecond}, &log)
			brokertest.Eventually(t, 10*time.Second, "pruned", func() bool { return strings.Contains(log.String(), "pruned 1 row(s)") })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if rows := w.rows(t, deadletter.Query{IDs: []string{"pp-002"}}); len(rows) != 0 {
				t.Errorf("pp-002 purged before the retention is still there: %+v", rows[0].State)
			}
			if n := len(w.rows(t, deadletter.Query{})); n != 2 {
				t.Errorf("%d rows after the prune, want 2 (pp-000, pp-001)", n)
			}

			// claim.dead.archive into the store's archive, once.
			if _, err := topo.DeclareArchive(conn, topo.Classic, topo.DefaultArchiveRetention); err != nil {
				t.Fatal(err)
			}
			ch := w.vh.Channel(t)
			m := parse(amqp.Delivery{MessageId: "arch-0", Body: brokertest.Claim("arch-0", "C-arch-0"),
				Headers: amqp.Table{"x-death": []any{amqp.Table{"queue": topo.Queue, "reason": "rejected", "count": int64(1), "time": time.Now().Truncate(time.Second)}}}}, false)
			if err := ch.Publish("", topo.ArchiveQueue, true, false, archived(m, Actor{Who: "carol", Via: "dlq purge"})); err != nil {
				t.Fatal(err)
			}
			brokertest.Eventually(t, 10*time.Second, "in the archive queue", func() bool { return w.vh.Depth(t, topo.ArchiveQueue) == 1 })
			var alog brokertest.Buffer
			done := make(chan error, 1)
			go func() {
				done <- Ingest(ctx, w.vh.Getenv(nil), w.st, IngestConfig{ArchiveQueue: true, Wait: 20 * time.Millisecond}, &alog)
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("ingest -archive-queue: %v\n%s", err, alog.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("ingest -archive-queue did not return once the archive queue was empty\n%s", alog.String())
			}
			if n := w.vh.Depth(t, topo.ArchiveQueue); n != 0 {
				t.Errorf("claim.dead.archive holds %d after ingest -archive-queue", n)
			}
			if r := w.row(t, "arch-0"); r.State != deadletter.StatePurged || r.StateBy != "carol" || r.StateVia != "dlq purge" || r.BrokerReason != "rejected" {
				t.Errorf("the archived message's row: %q by %q via %q (%q)", r.State, r.StateBy, r.StateVia, r.BrokerReason)
			}
		})
	}
}

// TestSearchRowsAndQueueAgree: -guid and -text select the same dead
// letters from the ingested rows (narrowed by their indexes, the words
// table for text) as from claim.dead (the filter alone): one rule,
// deadletter.HasText, decides for both sources and both backends.
func TestSearchRowsAndQueueAgree(t *testing.T) {
	for _, be := range ingestBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newIngestWorld(t, be.loc(t))
			bodies := map[string]string{
				"s-0": `{"guid":"s-0","claimId":"BUSY-1","docs":["a.pdf"],"note":"partner busy"}`,
				"s-1": `{"guid":"s-1","claimId":"C-2","docs":[],"note":"Documents missing"}`,
				"s-2": `{"guid":"s-2","claimId":"C-3","docs":[],"note":"documents-missing again"}`,
				"s-3": "not json at all: documents missing \xff",
			}
			var msgs []amqp.Publishing
			var rows []deadletter.Row
			for _, id := range []string{"s-0", "s-1", "s-2", "s-3"} {
				p := amqp.Publishing{MessageId: id, Body: []byte(bodies[id]), Headers: amqp.Table{}}
				msgs = append(msgs, p)
				rows = append(rows, rowOf(parse(amqp.Delivery{MessageId: id, Body: p.Body, Headers: p.Headers}, false), time.Now()))
			}
			w.vh.DeadLetter(t, msgs...)
			if _, err := w.dl.PutDeadLetters(context.Background(), rows); err != nil {
				t.Fatal(err)
			}
			conn := w.vh.Dial(t)
			list := func(newB func(*amqp.Connection, store.Store) (*Browser, error), c Config) string {
				b, err := newB(conn, w.st)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				ms, _ := walkSelected(t, b, c)
				return strings.Join(keysOf(ms), " ")
			}
			for _, c := range []struct {
				cfg  Config
				want string
			}{
				{Config{Text: "documents missing"}, "s-1 s-3"},
				{Config{Text: "DOCUMENTS"}, "s-1 s-2 s-3"},
				{Config{Text: "busy-1"}, "s-0"},
				{Config{Text: "usy"}, ""},
				{Config{GUID: "s-2"}, "s-2"},
				{Config{GUID: "s-2", Text: "busy"}, ""},
			} {
				fromQueue, fromRows := list(NewBrowser, c.cfg), list(NewIngestedBrowser, c.cfg)
				if fromQueue != c.want || fromRows != c.want {
					t.Errorf("-guid %q -text %q: from claim.dead %q, from the rows %q; want %q", c.cfg.GUID, c.cfg.Text, fromQueue, fromRows, c.want)
				}
			}
		})
	}
}
