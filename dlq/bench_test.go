package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/claim"
	"eaimq/internal/dlq"
	"eaimq/internal/rabbitctl"
	"eaimq/internal/store"
	"eaimq/internal/store/sqlite"
	"eaimq/internal/topo"
)

// BenchmarkDLQListRSS's private node, batch and limit.
const (
	rssNode  = "eaimqdlqrss@localhost"
	rssPort  = 5696
	rssDead  = 100_000
	rssLimit = 32 << 20
)

// BenchmarkDLQListRSS runs the real `dlq list` over 100,000 dead letters,
// with EAI_MQ_DB naming the consumer's store that holds a record of each
// (as an operator runs it), and reports its peak resident memory
// (getrusage's ru_maxrss) and the seconds a list takes (issue 24: ≤ 10 s),
// and the broker's resident memory before and at its peak during the list,
// against its memory watermark. It fails over 32 MiB (issue #13); it also
// fails unless list printed all 100,000 rows, each with the broker's
// reason, the partner's status and answer, and the reason on record, and
// claim.dead holds all 100,000 again afterwards. The same run lists the
// first 10,000 only (-limit) and reports the ratio: memory that grew with
// the queue would show there. The whole list runs with -max-held 0 (the
// old walk, holding all 100,000); then a list with the default -max-held
// must stop at it, print that many rows and say so in one line on stderr,
// and the broker's peak during it is reported against its watermark too
// (issue 29: ≤ 1.5).
//
// The dead letters are made the way the consumer makes them: claims
// published to eai.claim, a record of each 422 written through the store's
// Begin and Finish with the attempt the consumer records, and the deliveries
// rejected with requeue=false (basic.nack, many at a time), so that the
// broker itself dead-letters them through eai.dlx and writes their x-death
// headers. Publishing straight to claim.dead with made-up x-death headers
// would be faster, but would measure headers of our making.
//
// dlq's peak RSS comes through brokertest.PeakRSS: this process, after
// the setup, is larger than dlq (docs/figures.md), and read directly the
// figure would be its own. MiB-idle is `dlq -version`:
// what the binary takes before it does anything.
//
// On a private node: the walk makes the broker hold every message it took
// unacked until it ends, which raised the memory alarm of the machine's
// shared broker when tried there.
//
//	go test -run '^$' -bench DLQListRSS -benchtime 1x ./dlq
func BenchmarkDLQListRSS(b *testing.B) {
	vh, db := hundredThousand(b, rssNode, rssPort)

	bin := brokertest.Binary(b, "eaimq/dlq")
	dir := b.TempDir()
	env := append(os.Environ(), broker.EnvURL+"="+vh.URL, store.EnvPath+"="+db)
	// maxrssNote runs dlq args, stdout to a file (100,000 rows are 15 MB),
	// and returns its peak RSS in bytes, its stdout's file and its stderr.
	maxrssNote := func(args ...string) (int64, string, string) {
		out := filepath.Join(dir, "stdout")
		f, err := os.Create(out)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		var errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = f, &errb
		rss, err := brokertest.PeakRSS(b, cmd)
		if err != nil {
			b.Fatalf("dlq %s: %v\n%s", strings.Join(args, " "), err, errb.String())
		}
		return rss, out, errb.String()
	}
	// maxrss is maxrssNote for a run that must write nothing on stderr.
	maxrss := func(args ...string) (int64, string) {
		rss, out, note := maxrssNote(args...)
		if note != "" {
			b.Fatalf("dlq %s:\n%s", strings.Join(args, " "), note)
		}
		return rss, out
	}

	// Each run returns every message it took unacked when dlq's connection
	// closes; the broker does that after the process has ended.
	requeued := func() {
		brokertest.Eventually(b, 2*time.Minute, "claim.dead holding every dead letter again", func() bool {
			q := vh.Queues(b)[topo.DeadQueue]
			return q.Messages == rssDead && q.Unacked == 0
		})
	}
	const few = rssDead / 10
	var peak, fewRSS, idle int64
	var took time.Duration
	mem := brokerMemory(b, rssNode)
	var brokerBefore, brokerPeak, brokerFew, brokerBounded int64
	for b.Loop() {
		rss, _ := maxrss("-version")
		idle = max(idle, rss)
		mem.start()
		rss, out := maxrss("-limit", strconv.Itoa(few), "list")
		brokerFew = max(brokerFew, mem.stop())
		fewRSS = max(fewRSS, rss)
		checkListed(b, out, few, fmt.Sprintf("%d dead letter(s) listed of %d looked at; %d more in claim.dead not looked at (-limit %d); claim.dead keeps them all",
			few, few, rssDead-few, few))
		requeued()
		// The default first: the walk stops at -max-held, and says so.
		// (After a walk of all 100,000 the broker keeps much of that
		// memory for a while: measured second, it would count that too.)
		mem.start()
		_, out, note := maxrssNote("list")
		brokerBounded = max(brokerBounded, mem.stop())
		held := dlq.DefaultMaxHeld
		checkListed(b, out, held, fmt.Sprintf("%d dead letter(s) listed of %d looked at; %d more in claim.dead not looked at (-max-held %d); claim.dead keeps them all",
			held, held, rssDead-held, held))
		if want := fmt.Sprintf("dlq: stopped at -max-held %d: looked at %d dead letter(s), %d more in claim.dead beyond; ", held, held, rssDead-held); !strings.HasPrefix(note, want) || strings.Count(note, "\n") != 1 {
			b.Fatalf("dlq list at the bound wrote on stderr:\n%s\nwant one line beginning %q", note, want)
		}
		requeued()
		// The old walk, that holds all it looks at: -max-held 0.
		brokerBefore = mem.now()
		mem.start()
		t0 := time.Now()
		rss, out = maxrss("-max-held", "0", "list")
		took += time.Since(t0)
		brokerPeak = max(brokerPeak, mem.stop())
		peak = max(peak, rss)
		checkListed(b, out, rssDead, fmt.Sprintf("%d dead letter(s) listed of %d looked at; claim.dead keeps them all", rssDead, rssDead))
		requeued()
	}
	b.ReportMetric(float64(peak)/(1<<20), "MiB-peak-RSS")
	b.ReportMetric(float64(fewRSS)/(1<<20), "MiB-at-10k")
	b.ReportMetric(float64(idle)/(1<<20), "MiB-idle")
	b.ReportMetric(float64(peak)/float64(fewRSS), "rss100k/rss10k")
	b.ReportMetric(took.Seconds()/float64(b.N), "s/list")
	mem.report(b, brokerBefore, brokerPeak)
	b.ReportMetric(float64(brokerFew)/(1<<20), "MiB-broker-peak-at-10k")
	b.ReportMetric(float64(brokerBounded)/(1<<20), "MiB-broker-peak-max-held")
	b.ReportMetric(float64(brokerBounded)/float64(mem.limit), "broker-peak/watermark-max-held")
	if peak > rssLimit {
		b.Errorf("dlq list: peak RSS %.1f MiB over %d dead letters, limit %d MiB", float64(peak)/(1<<20), rssDead, rssLimit>>20)
	}
	if q := vh.Queues(b); q[topo.DeadQueue].Messages != rssDead || q[topo.Queue].Messages != 0 {
		b.Errorf("after list: claim.dead holds %d, claim.in %d; want %d and 0", q[topo.DeadQueue].Messages, q[topo.Queue].Messages, rssDead)
	}
}

// hundredThousand starts a private node, and leaves rssDead dead letters
// in its claim.dead and their records in the store at db.
func hundredThousand(b *testing.B, node string, port int) (*brokertest.VHost, string) {
	b.Helper()
	brokertest.PrivateNode(b, node, port)
	vh := brokertest.NewOn(b, rabbitctl.Ctl{Node: node}, fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", port))
	vh.Topology(b)
	db := filepath.Join(b.TempDir(), "processed.db")
	start := time.Now()
	deadLetters(b, vh, db, rssDead)
	b.Logf("setup: %d dead letters in claim.dead and in the store in %s", rssDead, time.Since(start).Round(time.Second))
	return vh, db
}

// checkListed reads list's table in file out: n distinct rows, each a
// claim of deadLetters with the broker's reason and the reason on record,
// then the closing line want.
func checkListed(b *testing.B, out string, n int, want string) {
	b.Helper()
	f, err := os.Open(out)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	rows, last := 0, ""
	seen := make(map[string]bool, n)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "rss-") {
			// MESSAGE_ID CLAIM_ID date time FROM BROKER CALLS STATUS ANSWER... REASON...
			fields := strings.Fields(line)
			if len(fields) < 10 || fields[4] != topo.Queue || fields[5] != "rejected" || fields[6] != "1" || fields[7] != "422" ||
				strings.Join(fields[8:], " ") != "documents missing rejected: rejected by the claim system" {
				b.Fatalf("row %d: %q", rows+1, line)
			}
			seen[fields[0]] = true
			rows++
		}
		last = line
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	if rows != n || len(seen) != n || last != want {
		b.Fatalf("dlq list printed %d rows (%d distinct), last line %q; want %d and %q", rows, len(seen), last, n, want)
	}
}

// deadLetters leaves n claims without docs in claim.dead, dead-lettered by
// the broker, and the consumer's record of each 422 in the store at db.
func deadLetters(b *testing.B, vh *brokertest.VHost, db string, n int) {
	b.Helper()
	guid := func(i int) string { return fmt.Sprintf("rss-%06d", i) }
	var wg sync.WaitGroup
	wg.Go(func() { record(b, db, n, guid) })
	publishClaims(b, vh, n, guid)
	rejectAll(b, vh, n)
	wg.Wait()
	brokertest.Eventually(b, 2*time.Minute, fmt.Sprintf("%d dead letters in claim.dead", n), func() bool {
		q := vh.Queues(b)
		return q[topo.DeadQueue].Messages == n && q[topo.Queue].Messages == 0 && q[topo.Queue].Unacked == 0
	})
}

// record writes what the consumer records for a claim the partner answered
// 422: Begin, then Finish with the call, its status and answer, and the
// dead-letter outcome. synchronous=normal only speeds the setup; the file
// holds the same rows.
func record(b *testing.B, db string, n int, guid func(int) string) {
	st, err := sqlite.Open(db, sqlite.Options{Synchronous: "normal"})
	if err != nil {
		b.Error(err)
		return
	}
	defer st.Close()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				id := guid(i)
				if _, err := st.Begin(ctx, id, claim.Copy{ClaimID: fmt.Sprintf("C-%06d", i), Fresh: true}, time.Minute); err != nil {
					b.Error(err)
					return
				}
				_, err := st.Finish(ctx, id, claim.Attempt{At: time.Now(), Status: 422,
					Error:   fmt.Sprintf(`{"claimId":"C-%06d","error":"documents missing"}`, i),
					Outcome: claim.OutRejected, Detail: claim.OutRejected.Describe(422, 0), Latency: time.Millisecond, Called: true})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// publishClaims publishes n claims without docs (the partner's 422) to
// eai.claim, persistent and confirmed, as publish does: message_id = guid.
// A thousand at a time, so that what waits for its confirm stays bounded.
func publishClaims(b *testing.B, vh *brokertest.VHost, n int, guid func(int) string) {
	b.Helper()
	for start := 0; start < n; start += 1000 {
		var msgs []amqp.Publishing
		for i := start; i < min(start+1000, n); i++ {
			msgs = append(msgs, amqp.Publishing{MessageId: guid(i), Body: brokertest.Claim(guid(i), fmt.Sprintf("C-%06d", i))})
		}
		vh.Publish(b, msgs...)
	}
}

// rejectAll takes n deliveries from claim.in and rejects them with
// requeue=false, as the consumer rejects a 422: the broker dead-letters
// each through eai.dlx to claim.dead. One basic.nack covers many.
func rejectAll(b *testing.B, vh *brokertest.VHost, n int) {
	b.Helper()
	ch := vh.Channel(b)
	defer ch.Close()
	const batch = 500
	if err := ch.Qos(2*batch, 0, false); err != nil {
		b.Fatal(err)
	}
	ds, err := ch.Consume(topo.Queue, "rss-reject", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	for got := 0; got < n; {
		var d amqp.Delivery
		select {
		case d = <-ds:
		case <-time.After(time.Minute):
			b.Fatalf("rejected %d of %d: no delivery for a minute", got, n)
		}
		got++
		if got%batch == 0 || got == n {
			if err := d.Nack(true, false); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := ch.Cancel("rss-reject", false); err != nil {
		b.Fatal(err)
	}
}
