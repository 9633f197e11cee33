package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/claim"
	"eaimq/internal/dlq"
	"eaimq/internal/pgtest"
	"eaimq/internal/rabbitctl"
	"eaimq/internal/store"
	"eaimq/internal/store/deadletter"
	"eaimq/internal/topo"
)

// The figures of issue 29's table (docs/figures.md, "Dead letters at
// scale"): ingestion against a bare consumer, and the read path over a
// million ingested rows.

// BenchmarkDLQIngest's private node and size.
const (
	ingestNode = "eaimqdlqingest@localhost"
	ingestPort = 5692
	ingestDead = 100_000
	ingestBody = 1024
)

// BenchmarkDLQIngest: the real `dlq ingest` process over 100,000 dead
// letters of 1 KiB, into SQLite and into PostgreSQL, each against a bare
// consumer measured in the same run: amqp091-go with ingest's prefetch
// (2 x -batch) that acks each -batch with one multiple ack, storing
// nothing. A rate is the dead letters over the time from the process's
// start (the bare one's dial) to the last one stored (acked, for the bare
// consumer). The broker's resident memory is sampled during each ingest
// and reported against what it was just before (claim.dead full): an
// ingester holds at most its prefetch, so the broker should not grow.
//
// claim.dead is filled for each run the way the consumer fills it: claims
// published to eai.claim and rejected (requeue=false), so that the broker
// writes their x-death headers. On a private node (port 5692): 100 MB of
// messages are not for the shared broker.
//
// What the broker's growth depends on, for issue 29's ≤ 1.1: with
// EAIMQ_BENCH_DEAD_POLICY a policy definition is set on claim.dead
// first (`{"queue-mode":"lazy"}`: 3.10 keeps the messages on disk, not
// in memory), and EAIMQ_BENCH_INGEST_BATCH is dlq ingest's -batch and
// the bare consumer's (prefetch 2 x that).
//
// The order alternates: odd rounds run the bare consumer first, even
// rounds the two ingests first, each on a fill of its own, so that the
// broker's growth of one is not measured on a node that the other took
// through 100 MB just before (-benchtime 2x runs both orders). Each
// phase's growth is logged. With EAIMQ_BENCH_BROKER_BREAKDOWN=1 the
// node's own accounting (rabbit_vm:memory(), what memory_breakdown
// prints) is logged before each phase, half-way through an ingest, and
// at its end: what grows. It costs an Erlang VM's start each time, on
// the shared cores, so the rates of such a run are not figures.
//
//	go test -run '^$' -bench DLQIngest -benchtime 1x ./dlq
func BenchmarkDLQIngest(b *testing.B) {
	brokertest.PrivateNode(b, ingestNode, ingestPort)
	vh := brokertest.NewOn(b, rabbitctl.Ctl{Node: ingestNode}, fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", ingestPort))
	vh.Topology(b)
	if def := os.Getenv("EAIMQ_BENCH_DEAD_POLICY"); def != "" {
		vh.Policy(b, "bench-dead", topo.DeadQueue, def)
		b.Logf("claim.dead's policy: %s", def)
	}
	batch := dlq.DefaultIngestBatch
	if s := os.Getenv("EAIMQ_BENCH_INGEST_BATCH"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("EAIMQ_BENCH_INGEST_BATCH=%q: not a batch size", s)
		}
		batch = n
		b.Logf("-batch %d (prefetch %d)", batch, 2*batch)
	}
	bin := brokertest.Binary(b, "eaimq/dlq")
	mem := brokerMemory(b, ingestNode)
	round := 0
	breakdown := func(string) {}
	if os.Getenv("EAIMQ_BENCH_BROKER_BREAKDOWN") != "" {
		breakdown = func(when string) { progress(b, "fill %d: the broker %s: %s", round, when, memoryBreakdown(ingestNode)) }
	}
	var bare, lite, pg time.Duration
	var before, peak float64 // the largest peak/before of the two ingests
	fill := func() {
		round++
		start := time.Now()
		fillDead(b, vh, ingestDead, fmt.Sprintf("ing%d", round))
		b.Logf("setup: %d dead letters of %d bytes in claim.dead in %s", ingestDead, ingestBody, time.Since(start).Round(time.Second))
	}
	ingest := func(loc string) time.Duration {
		// The consumer's store, as a deployment has it; then read-only
		// here, beside dlq ingest's writer.
		st, err := store.Open(loc, store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		st.Close()
		if st, err = store.Open(loc, store.Options{ReadOnly: true}); err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		dl, _ := store.DeadLettersOf(st)
		fill()
		breakdown("before an ingest")
		m0 := mem.now()
		mem.start()
		half := false
		c0 := mem.cpu()
		cmd := exec.Command(bin, "ingest", "-batch", strconv.Itoa(batch))
		cmd.Env = append(os.Environ(), broker.EnvURL+"="+vh.URL, store.EnvPath+"="+loc)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		brokertest.Eventually(b, 10*time.Minute, "every dead letter ingested", func() bool {
			select {
			case err := <-done:
				b.Fatalf("dlq ingest exited: %v\n%s", err, errb.String())
			default:
			}
			n, err := dl.CountDeadLetters(context.Background(), deadletter.Query{})
			if err == nil && n >= ingestDead/2 && !half {
				half = true
				breakdown("half-way through an ingest")
			}
			return err == nil && n == ingestDead
		})
		took := time.Since(t0)
		m1 := mem.stop()
		brokerCPU := mem.cpu() - c0
		breakdown("at the end of an ingest")
		progress(b, "fill %d: the broker during the ingest into %s: %.1f → %.1f MiB at its peak (%.3f)", round, kind(loc),
			float64(m0)/(1<<20), float64(m1)/(1<<20), float64(m1)/float64(m0))
		cmd.Process.Signal(syscall.SIGTERM)
		if err := <-done; err != nil {
			b.Fatalf("dlq ingest after SIGTERM: %v\n%s", err, errb.String())
		}
		// The CPU each side took over the wall time: whether the two
		// cores, not a wait, bound the rate.
		progress(b, "fill %d: the ingest into %s took %s: dlq ingest %s of CPU (to its exit), the broker %s", round, kind(loc),
			took.Round(time.Millisecond), (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Round(time.Millisecond),
			brokerCPU.Round(time.Millisecond))
		if r := float64(m1) / float64(m0); r > peak/max(before, 1) {
			before, peak = float64(m0), float64(m1)
		}
		if q := vh.Queues(b)[topo.DeadQueue]; q.Messages != 0 || q.Unacked != 0 {
			b.Fatalf("after dlq ingest claim.dead holds %d ready, %d unacked", q.Messages, q.Unacked)
		}
		return took
	}
	var bareGrew float64 // the broker's peak / before during the bare runs
	bareRun := func() {
		fill()
		// The broker sampled during the bare run too: what of its growth
		// any consumer costs, and what dlq ingest's does.
		breakdown("before the bare consumer")
		m0 := mem.now()
		mem.start()
		c0 := mem.cpu()
		took := bareConsume(b, vh, ingestDead, batch)
		bare += took
		m1 := mem.stop()
		progress(b, "fill %d: the bare consumer took %s: the broker %s of CPU", round, took.Round(time.Millisecond), (mem.cpu() - c0).Round(time.Millisecond))
		breakdown("at the end of the bare consumer")
		progress(b, "fill %d: the broker during the bare consumer: %.1f → %.1f MiB at its peak (%.3f)", round,
			float64(m0)/(1<<20), float64(m1)/(1<<20), float64(m1)/float64(m0))
		bareGrew = max(bareGrew, float64(m1)/float64(m0))
	}
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			bareRun()
		}
		lite += ingest(filepath.Join(b.TempDir(), "processed.db"))
		pg += ingest(pgtest.New(b))
		if i%2 == 1 {
			bareRun()
		}
	}
	rate := func(d time.Duration) float64 { return float64(ingestDead*b.N) / d.Seconds() }
	b.ReportMetric(rate(bare), "dead/s-bare")
	b.ReportMetric(rate(lite), "dead/s-sqlite")
	b.ReportMetric(rate(pg), "dead/s-postgres")
	b.ReportMetric(rate(lite)/rate(bare), "sqlite/bare")
	b.ReportMetric(rate(pg)/rate(bare), "postgres/bare")
	b.ReportMetric(before/(1<<20), "MiB-broker-before")
	b.ReportMetric(peak/(1<<20), "MiB-broker-peak")
	b.ReportMetric(peak/before, "broker-peak/before")
	b.ReportMetric(bareGrew, "broker-peak/before-bare")
}

// progress says how a phase went on stderr, at once: a benchmark's log is
// cut to its first lines (testing's trimOutput), and these are what the
// figures are read from.
func progress(b *testing.B, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s: %s\n", b.Name(), fmt.Sprintf(format, args...))
}

// kind is the backend of the store at loc.
func kind(loc string) string {
	if strings.HasPrefix(loc, "postgres") {
		return "postgres"
	}
	return "sqlite"
}

// memoryBreakdown is the node's own accounting of its memory, MiB: what
// `rabbitmq-diagnostics memory_breakdown` prints (rabbit_vm:memory(),
// the categories over 2 MiB), the VM's allocated total and its RSS.
func memoryBreakdown(node string) string {
	out, err := rabbitctl.Ctl{Node: node}.Run(context.Background(), "-q", "eval",
		`M = rabbit_vm:memory(), `+
			`io:format("~w rss ~w erlang ~w~n", [[{K, V bsr 20} || {K, V} <- M, is_integer(V), V > 2 bsl 20], `+
			`vm_memory_monitor:get_process_memory() bsr 20, erlang:memory(total) bsr 20]).`)
	if err != nil {
		return fmt.Sprintf("(rabbitmqctl eval: %v %s)", err, out)
	}
	return strings.TrimSpace(string(out))
}

// bareConsume takes n messages from claim.dead with prefetch 2 x batch and
// acks each batch with one multiple ack, storing nothing: dlq ingest's
// ceiling. It returns the time from the dial to the last ack.
func bareConsume(b *testing.B, vh *brokertest.VHost, n, batch int) time.Duration {
	b.Helper()
	t0 := time.Now()
	conn, err := amqp.Dial(vh.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Qos(2*batch, 0, false); err != nil {
		b.Fatal(err)
	}
	ds, err := ch.Consume(topo.DeadQueue, "bare", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	for got := 0; got < n; {
		var d amqp.Delivery
		select {
		case d = <-ds:
		case <-time.After(time.Minute):
			b.Fatalf("bare consumer: %d of %d, then nothing for a minute", got, n)
		}
		got++
		if got%batch == 0 || got == n {
			if err := d.Ack(true /* multiple */); err != nil {
				b.Fatal(err)
			}
		}
	}
	// The last ack is a frame on its way: a confirm-less channel closes
	// after it (the close waits for the broker's close-ok, which follows
	// the ack it sent first).
	ch.Close()
	return time.Since(t0)
}

// fillDead leaves n dead letters of ingestBody bytes in claim.dead,
// dead-lettered by the broker from claim.in.
func fillDead(b *testing.B, vh *brokertest.VHost, n int, prefix string) {
	b.Helper()
	pad := strings.Repeat("x", ingestBody-90)
	for start := 0; start < n; start += 1000 {
		var msgs []amqp.Publishing
		for i := start; i < min(start+1000, n); i++ {
			id := fmt.Sprintf("%s-%06d", prefix, i)
			msgs = append(msgs, amqp.Publishing{MessageId: id,
				Body: fmt.Appendf(nil, `{"guid":%q,"claimId":"C-%s","docs":[],"pad":%q}`, id, id, pad)})
		}
		vh.Publish(b, msgs...)
	}
	rejectAll(b, vh, n)
	brokertest.Eventually(b, 5*time.Minute, fmt.Sprintf("%d dead letters in claim.dead", n), func() bool {
		q := vh.Queues(b)
		return q[topo.DeadQueue].Messages == n && q[topo.Queue].Messages == 0 && q[topo.Queue].Unacked == 0
	})
}

// millionRows is the size of BenchmarkDLQReadMillion's table.
const millionRows = 1_000_000

// BenchmarkDLQReadMillion: dlq list and show over 1,000,000 ingested dead
// letters, on each backend, exec to exit (the median of 5 runs each):
// `dlq -limit 50 list`, `dlq show CLAIMID` (a claim in the middle), and the
// whole `dlq list` streamed to a file, its time and peak RSS (issue 29: ≤
// 150 ms, ≤ 150 ms, ≤ 15 s and ≤ 64 MiB). The table is filled in bulk by
// SQL from one row that dlq ingest wrote from a real dead letter (the
// broker's x-death and all): the broker need not hold a million first.
// The vhost is on the machine's broker: list reads the store, and only
// asks the broker what claim.dead still holds.
//
//	go test -run '^$' -bench DLQReadMillion -benchtime 1x ./dlq
func BenchmarkDLQReadMillion(b *testing.B) {
	for _, be := range []struct {
		name string
		loc  func() string
	}{
		{"sqlite", func() string { return filepath.Join(b.TempDir(), "processed.db") }},
		{"postgres", func() string { return pgtest.New(b) }},
	} {
		b.Run(be.name, func(b *testing.B) {
			vh := brokertest.New(b)
			vh.Topology(b)
			loc := be.loc()
			bin := brokertest.Binary(b, "eaimq/dlq")
			env := append(os.Environ(), broker.EnvURL+"="+vh.URL, store.EnvPath+"="+loc)
			start := time.Now()
			millionDead(b, vh, bin, env, loc)
			b.Logf("setup: %d rows in %s", millionRows, time.Since(start).Round(time.Second))
			out := filepath.Join(b.TempDir(), "stdout")
			var cpu time.Duration // of the last run
			run := func(args ...string) (time.Duration, int64, string) {
				f, err := os.Create(out)
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				cmd := exec.Command(bin, args...)
				cmd.Env = env
				var errb bytes.Buffer
				cmd.Stdout, cmd.Stderr = f, &errb
				t0 := time.Now()
				rss, err := brokertest.PeakRSS(b, cmd)
				took := time.Since(t0)
				if err != nil {
					b.Fatalf("dlq %s: %v\n%s", strings.Join(args, " "), err, errb.String())
				}
				// The spawner's usage includes dlq's, the child it waited
				// for: the CPU dlq took, whatever the machine's load made
				// of the wall time.
				cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
				return took, rss, errb.String()
			}
			// median is the median wall time of 5 runs, and the median of
			// their CPU times: the machine is shared, and the CPU says
			// what the load made of the wall time.
			median := func(args ...string) (time.Duration, time.Duration) {
				var ds, cs []time.Duration
				for range 5 {
					d, _, _ := run(args...)
					ds, cs = append(ds, d), append(cs, cpu)
				}
				slices.Sort(ds)
				slices.Sort(cs)
				return ds[2], cs[2]
			}
			mid := fmt.Sprintf("C-bulk-%07d", millionRows/2)
			var page, show, whole, pageCPU, showCPU time.Duration
			var rss int64
			for b.Loop() {
				page, pageCPU = median("-limit", "50", "list")
				if rows := rowCount(b, out); rows != 50 {
					b.Fatalf("dlq -limit 50 list printed %d rows, want 50", rows)
				}
				show, showCPU = median("show", mid)
				if s, _ := os.ReadFile(out); !bytes.Contains(s, []byte(mid)) || !bytes.Contains(s, []byte("x-death")) {
					b.Fatalf("dlq show %s:\n%s", mid, s)
				}
				var note string
				whole, rss, note = run("list")
				if rows := rowCount(b, out); rows != millionRows {
					b.Fatalf("dlq list printed %d rows, want %d\n%s", rows, millionRows, note)
				}
			}
			b.ReportMetric(float64(page.Milliseconds()), "ms-list-limit-50")
			b.ReportMetric(float64(show.Milliseconds()), "ms-show")
			b.ReportMetric(float64(pageCPU.Milliseconds()), "ms-list-limit-50-cpu")
			b.ReportMetric(float64(showCPU.Milliseconds()), "ms-show-cpu")
			b.ReportMetric(whole.Seconds(), "s-list-all")
			b.ReportMetric(float64(rss)/(1<<20), "MiB-list-all-RSS")
			b.ReportMetric(cpu.Seconds(), "s-list-all-cpu")
		})
	}
}

// millionDead fills the store at loc with millionRows ingested dead
// letters: one dead-lettered by the broker and ingested by dlq ingest,
// then copies of its row made by SQL, each with ids of its own
// (bulk-NNNNNNN, C-bulk-NNNNNNN) in its columns, body and properties.
func millionDead(b *testing.B, vh *brokertest.VHost, bin string, env []string, loc string) {
	b.Helper()
	st, err := store.Open(loc, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	st.Close()
	const first = "bulk-0000000"
	vh.Publish(b, amqp.Publishing{MessageId: first, Body: fmt.Appendf(nil, `{"guid":%q,"claimId":"C-%s","docs":[],"amount":1200,"policy":"P-88231","holder":"A. N. Example"}`, first, first)})
	rejectAll(b, vh, 1)
	brokertest.Eventually(b, 30*time.Second, "the first dead-lettered", func() bool { return vh.Depth(b, topo.DeadQueue) == 1 })
	cmd := exec.Command(bin, "ingest")
	cmd.Env = env
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	brokertest.Eventually(b, 30*time.Second, "the first ingested", func() bool {
		q := vh.Queues(b)[topo.DeadQueue]
		return q.Messages == 0 && q.Unacked == 0
	})
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		b.Fatalf("dlq ingest: %v\n%s", err, errb.String())
	}
	var bulk *exec.Cmd
	if strings.HasPrefix(loc, "postgres") {
		bulk = exec.Command("psql", "-v", "ON_ERROR_STOP=1", "-q", loc, "-c", fmt.Sprintf(`
			INSERT INTO dead_letters (%[1]s)
			SELECT 'copy:bulk-' || i, replace(t.message_id, '0000000', n), replace(t.claim_id, '0000000', n), replace(t.guid, '0000000', n),
				t.reason, t.status, t.answer, t.attempts, t.record, t.dead_at, t.broker_reason,
				replace(t.properties, '0000000', n), t.headers,
				convert_to(replace(convert_from(t.body, 'UTF8'), '0000000', n), 'UTF8'), t.raw, t.ingested_at
			FROM generate_series(1, %[2]d) AS i, lpad(i::text, 7, '0') AS n, (SELECT * FROM dead_letters ORDER BY seq LIMIT 1) AS t;`,
			deadletter.Columns, millionRows-1),
			// As autovacuum leaves a table that has settled: the
			// visibility map set, so that count(*) can read an index.
			"-c", "VACUUM ANALYZE dead_letters")
	} else {
		bulk = exec.Command("sqlite3", loc, fmt.Sprintf(`
			WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %[2]d)
			INSERT INTO dead_letters (%[1]s)
			SELECT 'copy:bulk-' || i, replace(t.message_id, '0000000', n), replace(t.claim_id, '0000000', n), replace(t.guid, '0000000', n),
				t.reason, t.status, t.answer, t.attempts, t.record, t.dead_at, t.broker_reason,
				replace(t.properties, '0000000', n), t.headers,
				CAST(replace(CAST(t.body AS TEXT), '0000000', n) AS BLOB), t.raw, t.ingested_at
			FROM (SELECT i, printf('%%07d', i) AS n FROM s), (SELECT * FROM dead_letters ORDER BY seq LIMIT 1) AS t;`,
			deadletter.Columns, millionRows-1))
	}
	if out, err := bulk.CombinedOutput(); err != nil {
		b.Fatalf("%s: %v\n%s", bulk.Path, err, out)
	}
}

// rowCount is how many of list's rows the file at path holds: lines that
// begin with a bulk message_id.
func rowCount(b *testing.B, path string) int {
	b.Helper()
	s, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return bytes.Count(s, []byte("\nbulk-")) + bytes.Count(s[:min(len(s), 5)], []byte("bulk-"))
}

// BenchmarkDLQServeGroupsMillion: dlq serve's groups view over 1,000,000
// ingested rows, on each backend, first load: the time to the first byte
// of GET / from a `dlq serve -refresh 0` just started (issue 29: ≤ 1 s),
// the median of 5 starts. millionDead fills the store, regroup gives the
// rows three groups by their records (a third each: rejected 422,
// failed-twice 503, and no record), and the page is checked to name each
// with its count: the GROUP BY over the rows (deadletter.GroupsSQL), not a
// walk of a million through the model.
//
//	go test -run '^$' -bench DLQServeGroupsMillion -benchtime 1x ./dlq
func BenchmarkDLQServeGroupsMillion(b *testing.B) {
	for _, be := range []struct {
		name string
		loc  func() string
	}{
		{"sqlite", func() string { return filepath.Join(b.TempDir(), "processed.db") }},
		{"postgres", func() string { return pgtest.New(b) }},
	} {
		b.Run(be.name, func(b *testing.B) {
			vh := brokertest.New(b)
			vh.Topology(b)
			loc := be.loc()
			bin := brokertest.Binary(b, "eaimq/dlq")
			env := []string{broker.EnvURL + "=" + vh.URL, store.EnvPath + "=" + loc}
			start := time.Now()
			millionDead(b, vh, bin, append(os.Environ(), env...), loc)
			regroup(b, loc)
			b.Logf("setup: %d rows in %s", millionRows, time.Since(start).Round(time.Second))
			var first time.Duration
			for b.Loop() {
				var ds []time.Duration
				for range 5 {
					base, _, stop := startServe(b, env...)
					d, page := get(b, base+"/")
					stop()
					for _, want := range []string{`<span class="count">333334</span> rejected · 422`,
						`<span class="count">333333</span> failed-twice · 503`, `<span class="count">333333</span> unknown`} {
						if !strings.Contains(page, want) {
							b.Fatalf("the groups page lacks %q:\n%.3000s", want, page)
						}
					}
					ds = append(ds, d)
				}
				slices.Sort(ds)
				first = ds[2]
			}
			b.ReportMetric(float64(first.Milliseconds()), "ms-ttfb-groups")
			// A group's second page and a search by a part of a claimId,
			// each the median of three, on one server whose groups are
			// counted (as a person reaches them, from the groups page).
			base, _, stop := startServe(b, env...)
			_, page := get(b, base+"/")
			m := regexp.MustCompile(`/group\?id=([0-9a-f]+)`).FindStringSubmatch(page)
			if m == nil {
				b.Fatalf("no group's link on the groups page:\n%.3000s", page)
			}
			timed := func(path, want string) time.Duration {
				var ds []time.Duration
				for range 3 {
					d, page := get(b, base+path)
					if !strings.Contains(page, want) {
						b.Fatalf("GET %s lacks %q:\n%.3000s", path, want, page)
					}
					ds = append(ds, d)
				}
				slices.Sort(ds)
				return ds[1]
			}
			b.ReportMetric(float64(timed("/group?id="+m[1]+"&page=2", "page 2 of").Milliseconds()), "ms-ttfb-group-page-2")
			b.ReportMetric(float64(timed("/search?q=c-bulk-012345", "10 match(es)").Milliseconds()), "ms-ttfb-search")
			stop()
		})
	}
}

// regroup gives millionDead's rows three groups, by seq: a third with the
// consumer's record of a rejection (422), a third of a failure after the
// retry (503), the rest as they are (no record: unknown), with the
// columns that dlq ingest writes from a record (rowOf).
func regroup(b *testing.B, loc string) {
	b.Helper()
	var sets []string
	for _, g := range []struct {
		mod    int
		reason claim.Reason
		status int
		answer string
	}{{1, claim.Rejected, 422, `{"error":"documents missing"}`}, {2, claim.FailedTwice, 503, "busy"}} {
		rec, err := json.Marshal(claim.Record{State: claim.StateDead, Outcome: claim.Outcome{Action: claim.DeadLetter, Reason: g.reason},
			Attempts: 2, LastStatus: g.status, LastError: g.answer})
		if err != nil {
			b.Fatal(err)
		}
		quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
		sets = append(sets, fmt.Sprintf("UPDATE dead_letters SET reason = %s, status = %d, answer = %s, attempts = 2, record = %s WHERE seq %% 3 = %d;",
			quote(g.reason.String()), g.status, quote(g.answer), quote(string(rec)), g.mod))
	}
	var cmd *exec.Cmd
	if strings.HasPrefix(loc, "postgres") {
		cmd = exec.Command("psql", "-v", "ON_ERROR_STOP=1", "-q", loc, "-c", strings.Join(sets, "\n"), "-c", "VACUUM ANALYZE dead_letters")
	} else {
		cmd = exec.Command("sqlite3", loc, strings.Join(sets, "\n"))
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s: %v\n%s", cmd.Path, err, out)
	}
}

// BenchmarkDLQReplayRows' private node and size.
const (
	replayNode = "eaimqdlqreplay@localhost"
	replayPort = 5699
	replayRows = 100_000
)

// BenchmarkDLQReplayRows: a replay of 100,000 selected ingested rows
// against a bulk publish of 100,000 files in the same run, each the real
// process timed from exec to exit (issue 29: ≥ 0.7), and the broker's
// peak resident memory across both against its watermark (memSampler).
//
// The rows are real: claims the partner rejected (their 422 on record in
// the consumer's store), dead-lettered by the broker from claim.in, and
// taken in by dlq ingest, x-death and all: a replay reads each row's
// body, properties and headers, so copies made by SQL would measure the
// same work, but the setup costs only two minutes and leaves nothing to
// argue. Then `dlq -reason rejected replay -all -rate 0`: unpaced,
// where the default (500 a second over rows) is a pace for operators, so
// that a bulk replay does not flood the consumer and the partner behind
// it; 500 a second would make the ratio a setting, not a figure. Its
// confirms are counted in claim.in's depth, and every row is replayed.
// Then publish over 100,000 files holding the same bodies, with its
// default window, into a second vhost of the same node, and its claim.in
// counted too. Odd rounds replay first, even rounds publish first; each
// round fills the store again. On a private node (port 5699): 200,000
// messages are not for the shared broker.
//
//	go test -run '^$' -bench DLQReplayRows -benchtime 1x ./dlq
func BenchmarkDLQReplayRows(b *testing.B) {
	brokertest.PrivateNode(b, replayNode, replayPort)
	ctl, base := rabbitctl.Ctl{Node: replayNode}, fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", replayPort)
	vh := brokertest.NewOn(b, ctl, base)
	vh.Topology(b)
	pv := brokertest.NewOn(b, ctl, base)
	pv.Topology(b)
	dlqBin := brokertest.Binary(b, "eaimq/dlq")
	pubBin := brokertest.Binary(b, "eaimq/publish")
	mem := brokerMemory(b, replayNode)
	guid := func(i int) string { return fmt.Sprintf("rss-%06d", i) }
	// The files' names are short, in base 36, and publish runs in their
	// directory: 100,000 paths of the temporary directory's length are
	// more than exec's 2 MiB of arguments (ARG_MAX), and one process over
	// all of them is publish at its fastest, the figure to compare with.
	dir := b.TempDir()
	files := make([]string, replayRows)
	for i := range files {
		files[i] = strconv.FormatInt(int64(i), 36)
		if err := os.WriteFile(filepath.Join(dir, files[i]), brokertest.Claim(guid(i), fmt.Sprintf("C-%06d", i)), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	// Written out now, not during a timed turn (see publish's benchFiles).
	syscall.Sync()
	var replayAll, publishAll, replayCPU, publishCPU time.Duration
	var before, peak int64
	run := func(bin string, env []string, args ...string) (time.Duration, time.Duration, string) {
		cmd := exec.Command(bin, args...)
		cmd.Env, cmd.Dir = env, dir
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		t0 := time.Now()
		err := cmd.Run()
		took := time.Since(t0)
		if err != nil {
			b.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args[:min(len(args), 6)], " "), err, tail(errb.String()))
		}
		// The CPU the process took, whatever the machine's load made of
		// the wall time.
		return took, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), out.String()
	}
	round := 0
	for b.Loop() {
		round++
		db := filepath.Join(b.TempDir(), "processed.db")
		env := append(os.Environ(), broker.EnvURL+"="+vh.URL, store.EnvPath+"="+db)
		start := time.Now()
		deadLetters(b, vh, db, replayRows)
		ingestAll(b, dlqBin, env, db, vh, replayRows)
		b.Logf("setup: %d rows ingested from claim.dead in %s", replayRows, time.Since(start).Round(time.Second))
		replay := func() {
			took, cpu, out := run(dlqBin, env, "-reason", "rejected", "replay", "-all", "-rate", "0")
			if want := fmt.Sprintf("dlq: %d replayed, 0 skipped", replayRows); !strings.Contains(out, want) {
				b.Fatalf("dlq replay: want %q in its output; its last lines:\n%s", want, tail(out))
			}
			if n := vh.Depth(b, topo.Queue); n != replayRows {
				b.Fatalf("after dlq replay claim.in holds %d, want %d", n, replayRows)
			}
			replayAll += took
			replayCPU += cpu
			b.Logf("round %d: replay %s (%s CPU)", round, took.Round(time.Millisecond), cpu.Round(time.Millisecond))
		}
		publish := func() {
			took, cpu, out := run(pubBin, append(os.Environ(), broker.EnvURL+"="+pv.URL), files...)
			if want := fmt.Sprintf("%d sent, 0 returned", replayRows); !strings.Contains(out, want) {
				b.Fatalf("publish: want %q in its output; its last lines:\n%s", want, tail(out))
			}
			if n := pv.Depth(b, topo.Queue); n != replayRows {
				b.Fatalf("after publish claim.in holds %d, want %d", n, replayRows)
			}
			publishAll += took
			publishCPU += cpu
			b.Logf("round %d: publish %s (%s CPU)", round, took.Round(time.Millisecond), cpu.Round(time.Millisecond))
		}
		// The broker sampled through each phase, and each phase's peak
		// logged: which of the two takes the node where.
		m0 := mem.now()
		phase := func(name string, run func()) {
			p0 := mem.now()
			mem.start()
			run()
			m1 := mem.stop()
			b.Logf("round %d: the broker during %s: %.1f → %.1f MiB at its peak (watermark %.0f)", round, name,
				float64(p0)/(1<<20), float64(m1)/(1<<20), float64(mem.limit)/(1<<20))
			if m1 > peak {
				before, peak = m0, m1
			}
		}
		if round%2 == 1 {
			phase("the replay", replay)
			purgeQueue(b, vh, topo.Queue)
			phase("publish", publish)
		} else {
			phase("publish", publish)
			purgeQueue(b, pv, topo.Queue)
			phase("the replay", replay)
		}
		purgeQueue(b, vh, topo.Queue)
		purgeQueue(b, pv, topo.Queue)
	}
	rate := func(d time.Duration) float64 { return float64(replayRows*b.N) / d.Seconds() }
	b.ReportMetric(rate(replayAll), "rows/s-replay")
	b.ReportMetric(rate(publishAll), "claims/s-publish")
	b.ReportMetric(rate(replayAll)/rate(publishAll), "replay/publish")
	b.ReportMetric(replayCPU.Seconds()/float64(b.N), "s-replay-cpu")
	b.ReportMetric(publishCPU.Seconds()/float64(b.N), "s-publish-cpu")
	mem.report(b, before, peak)
}

// ingestAll runs dlq ingest until the store at loc holds n dead letters
// and claim.dead is empty, then stops it.
func ingestAll(b *testing.B, bin string, env []string, loc string, vh *brokertest.VHost, n int) {
	b.Helper()
	// The store's schema as the consumer makes it, then read-only here
	// beside dlq ingest's writer.
	st, err := store.Open(loc, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	st.Close()
	if st, err = store.Open(loc, store.Options{ReadOnly: true}); err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	dl, _ := store.DeadLettersOf(st)
	cmd := exec.Command(bin, "ingest")
	cmd.Env = env
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	brokertest.Eventually(b, 10*time.Minute, "every dead letter ingested", func() bool {
		select {
		case err := <-done:
			b.Fatalf("dlq ingest exited: %v\n%s", err, errb.String())
		default:
		}
		c, err := dl.CountDeadLetters(context.Background(), deadletter.Query{})
		return err == nil && c == int64(n)
	})
	cmd.Process.Signal(syscall.SIGTERM)
	if err := <-done; err != nil {
		b.Fatalf("dlq ingest after SIGTERM: %v\n%s", err, errb.String())
	}
	if q := vh.Queues(b)[topo.DeadQueue]; q.Messages != 0 || q.Unacked != 0 {
		b.Fatalf("after dlq ingest claim.dead holds %d ready, %d unacked", q.Messages, q.Unacked)
	}
}

// purgeQueue empties queue q of vh.
func purgeQueue(b *testing.B, vh *brokertest.VHost, q string) {
	b.Helper()
	ch := vh.Channel(b)
	defer ch.Close()
	if _, err := ch.QueuePurge(q, false); err != nil {
		b.Fatal(err)
	}
}

// tail is the last lines of a process's output.
func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}
