package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/claim"
	"eaimq/internal/claimsys"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// The fault suite's accounting, after Jepsen's total-queue checker: every
// claim confirmed to the publisher must end delivered at the partner or in
// the dead-letter queue (lost = 0), nothing may turn up that was never
// published (unexpected = 0), and claims the partner accepted more than once
// are counted as duplicates against each scenario's stated bound.

// tally is one scenario's row.
type tally struct {
	test                          string // the top-level test that accounted it
	scenario                      string
	claims, lost, unexpected, dup int
	bound                         string
	note                          string
}

var (
	reportMu sync.Mutex
	report   []tally
)

// account drains claim.dead, reads the partner's accepted counts, and
// computes the row. claim.in must be empty: the scenario runs a consumer
// to the end first.
func (w *world) account(scenario string, published []string, boundDup int, bound, note string) tally {
	w.t.Helper()
	q := w.vh.Queues(w.t)[topo.Queue]
	if q.Messages != 0 || q.Unacked != 0 {
		w.t.Errorf("%s: claim.in still holds %d ready, %d unacked", scenario, q.Messages, q.Unacked)
	}
	dead := map[string]bool{}
	for _, d := range w.vh.Drain(w.t, topo.DeadQueue) {
		var g struct {
			Guid string `json:"guid"`
		}
		json.Unmarshal(d.Body, &g)
		dead[claim.Key(d.MessageId, g.Guid, d.Body)] = true
	}
	accepted := w.partner.Stats().Accepted
	want := map[string]bool{}
	for _, id := range published {
		want[id] = true
	}
	top, _, _ := strings.Cut(w.t.Name(), "/")
	row := tally{test: top, scenario: scenario, claims: len(want), bound: bound, note: note}
	for id := range want {
		if accepted[id] == 0 && !dead[id] {
			row.lost++
			w.t.Errorf("%s: LOST %s: confirmed, but neither delivered nor dead-lettered", scenario, id)
		}
	}
	for id, n := range accepted {
		if !want[id] {
			row.unexpected++
			w.t.Errorf("%s: UNEXPECTED %s at the partner", scenario, id)
		}
		if n > 1 {
			row.dup++
		}
	}
	for id := range dead {
		if !want[id] {
			row.unexpected++
			w.t.Errorf("%s: UNEXPECTED %s in the DLQ", scenario, id)
		}
	}
	if row.dup > boundDup {
		w.t.Errorf("%s: %d duplicates, bound %d", scenario, row.dup, boundDup)
	}
	w.t.Logf("| %s | %d | %d | %d | %d | %s | %s |", row.scenario, row.claims, row.lost, row.unexpected, row.dup, row.bound, row.note)
	reportMu.Lock()
	report = append(report, row)
	reportMu.Unlock()
	return row
}

// TestMain writes the fault table to $EAIMQ_FAULT_REPORT when set
// (scripts/faults.sh does, for docs/fault-suite.md), and removes the
// programs installed for the run (about 70 MiB in the temporary directory
// each run). Under -short (the contributors' fast loop, with no server)
// the package is skipped whole: its tests run the installed programs
// against the broker, some against PostgreSQL or in a browser.
func TestMain(m *testing.M) {
	flag.Parse() // testing.Short reads the parsed flags
	if testing.Short() {
		fmt.Println("internal/e2e: skipped under -short: its tests run the installed programs against the broker")
		os.Exit(0)
	}
	code := m.Run()
	if installDir != "" {
		os.RemoveAll(installDir)
	}
	if path := os.Getenv("EAIMQ_FAULT_REPORT"); path != "" && len(report) > 0 {
		inSourceOrder(report)
		var b strings.Builder
		b.WriteString("| scenario | claims | lost | unexpected | duplicates | bound | notes |\n|---|---:|---:|---:|---:|---|---|\n")
		for _, r := range report {
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s | %s |\n", r.scenario, r.claims, r.lost, r.unexpected, r.dup, r.bound, r.note)
		}
		os.WriteFile(path, []byte(b.String()), 0o644)
	}
	os.Exit(code)
}

// inSourceOrder sorts the rows by where their tests are declared (the
// files by name, as go test reads them): parallel tests account in the
// order they happen to finish, and the table must not reshuffle from one
// run to the next. A test's own rows keep the order they came in.
func inSourceOrder(rows []tally) {
	_, file, _, _ := runtime.Caller(0)
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(file), "*_test.go"))
	slices.Sort(files)
	pos := map[string]int{}
	decl := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	for _, f := range files {
		src, _ := os.ReadFile(f)
		for _, m := range decl.FindAllSubmatch(src, -1) {
			pos[string(m[1])] = len(pos)
		}
	}
	slices.SortStableFunc(rows, func(a, b tally) int { return pos[a.test] - pos[b.test] })
}

// drainWith runs a clean consumer until claim.in is empty and nothing is
// unacked, then stops it.
func (w *world) drainWith(args ...string) *proc {
	w.t.Helper()
	p := w.start("consumer", append([]string{"--claim", w.url, "--max-seconds", "120"}, args...)...)
	brokertest.Eventually(w.t, 90*time.Second, "claim.in drained", func() bool {
		if p.exited() {
			w.t.Fatalf("consumer exited: %s", p.errb.String())
		}
		q := w.vh.Queues(w.t)[topo.Queue]
		return q.Messages == 0 && q.Unacked == 0
	})
	p.stop(w.t)
	return p
}

func ms(n int) claimsys.Control { return claimsys.Control{DelayMS: &n} }

// TestFaultConsumerKilled: SIGKILL the consumer three times at random
// moments while 80 claims go to a 50 ms partner, then a clean run.
func TestFaultConsumerKilled(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.partner.Set(ms(50))
	published := w.publishFiles(brokertest.Claims("kill", "C-kill", 80, true)...)
	const prefetch = 5
	for kill := range 3 {
		before := len(w.partner.Stats().Accepted)
		target := before + 5 + rand.IntN(15)
		p := w.start("consumer", "--claim", w.url, "--max-seconds", "60", "--prefetch", fmt.Sprint(prefetch))
		brokertest.Eventually(t, 30*time.Second, fmt.Sprintf("kill %d: progress", kill+1), func() bool {
			return len(w.partner.Stats().Accepted) >= min(target, len(published)) || p.exited()
		})
		p.kill()
	}
	w.drainWith()
	st := w.partner.Stats()
	w.account("consumer SIGKILLed 3x, then a clean run", published, 3*prefetch, "≤ 3 kills × prefetch 5 = 15",
		fmt.Sprintf("Idempotency-Key would absorb %d", st.Absorbable))
}

// TestFaultPartnerDown: nothing listens at the claim URL for the whole
// run: every claim is tried twice and then dead-lettered.
func TestFaultPartnerDown(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.url = fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	published := w.publishFiles(brokertest.Claims("down", "C-down", 20, true)...)
	w.drainWith()
	st, err := store.Open(w.db, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range published {
		rec, _, _ := st.Get(context.Background(), id)
		if rec.State != "dead" || rec.Attempts != 2 || rec.LastError != "connection refused" {
			t.Errorf("%s: %+v, want dead after 2 refused calls", id, rec)
		}
	}
	w.account("partner down (connection refused)", published, 0, "0", "each tried twice, then DLQ")
}

// TestFaultPartnerFlapping: the partner alternates 503 and 201 on every
// call. Each claim is delivered once or dead-lettered with its reason.
func TestFaultPartnerFlapping(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	on := true
	w.partner.Set(claimsys.Control{Flap: &on})
	published := w.publishFiles(brokertest.Claims("flap", "C-flap", 40, true)...)
	w.drainWith()
	accepted := len(w.partner.Stats().Accepted)
	w.account("partner flapping 503/201", published, 0, "0",
		fmt.Sprintf("%d delivered once, %d dead-lettered after 2 tries", accepted, len(published)-accepted))
}

// TestFaultPartnerSlowerThanTimeout: the partner answers after 1.5 s, the
// consumer gives up after 300 ms: transient, twice, then DLQ; no hang, and
// the deadline is kept. Serial: the bound on the run's time (2 s over its
// --max-seconds) is a deadline measured, which a loaded machine would
// stretch.
func TestFaultPartnerSlowerThanTimeout(t *testing.T) {
	w := newWorld(t)
	w.partner.Set(ms(1500))
	published := w.publishFiles(brokertest.Claims("slow", "C-slow", 6, true)...)
	r := w.run("consumer", "--claim", w.url, "--max-seconds", "3", "--http-timeout", "300ms")
	if r.code != 0 || r.took > 3*time.Second+300*time.Millisecond+2*time.Second {
		t.Errorf("consumer: exit %d after %s (--max-seconds 3)", r.code, r.took)
	}
	if !strings.Contains(r.stderr, "timeout after 300ms") {
		t.Errorf("no timeout in the log:\n%s", r.stderr)
	}
	// A timeout is an unknown outcome: the partner here finishes every call
	// its caller gave up on, so the retry lands a second time. That is the
	// duplicate the Idempotency-Key exists for; without it, the bound is
	// one extra call per claim.
	w.partner.Set(ms(0))
	brokertest.Eventually(t, 10*time.Second, "the partner's late calls finish", func() bool {
		return w.partner.Stats().Total == 2*len(published)
	})
	w.account("partner slower than --http-timeout", published, len(published), "≤ 1 per claim (the retry after a timeout)",
		fmt.Sprintf("run took %.1fs of 3s; Idempotency-Key would absorb %d", r.took.Seconds(), w.partner.Stats().Absorbable))
}

// TestFaultBadMessages: another producer's messages, published raw.
func TestFaultBadMessages(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	huge := []byte(`{"guid":"raw-huge","claimId":"C-H","docs":["r.pdf"],"pad":"` + strings.Repeat("x", 1<<20) + `"}`)
	msgs := []amqp.Publishing{
		{Body: brokertest.Claim("raw-noid", "C-N", "r.pdf")},                      // no message_id: the guid serves
		{Body: []byte(`{"claimId":"C-anon","docs":["r.pdf"]}`)},                   // no id at all: DLQ
		{MessageId: "raw-text", ContentType: "text/plain", Body: []byte("hello")}, // not JSON: the partner's 400
		{MessageId: "raw-huge", Body: huge},
	}
	w.vh.Publish(t, msgs...)
	var published []string
	for _, m := range msgs {
		var g struct {
			Guid string `json:"guid"`
		}
		json.Unmarshal(m.Body, &g)
		published = append(published, claim.Key(m.MessageId, g.Guid, m.Body))
	}
	p := w.drainWith()
	if !strings.Contains(p.errb.String(), claim.ReasonNoID) {
		t.Errorf("no reason logged for the id-less message")
	}
	w.account("bad messages (no id, not JSON, 1 MiB)", published, 0, "0", "")
}

// TestFaultTwoConsumersOneStore: two consumer processes share one
// EAI_MQ_DB; a guid published ten times is POSTed once.
func TestFaultTwoConsumersOneStore(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.partner.Set(ms(100))
	dup := brokertest.Claim("twin-shared", "C-twin", "r.pdf")
	var batch [][]byte
	for range 10 {
		batch = append(batch, dup)
	}
	batch = append(batch, brokertest.Claims("twin", "C-twin", 20, true)...)
	published := w.publishFiles(batch...)
	a := w.start("consumer", "--claim", w.url, "--max-seconds", "60")
	w.drainWith()
	a.stop(t)
	if n := w.partner.Stats().ByGuid["twin-shared"]; n != 1 {
		t.Errorf("twin-shared POSTed %d times by two consumers, want 1", n)
	}
	w.account("two consumers, one EAI_MQ_DB, a guid sent 10x", published, 0, "0", "")
}

// TestFaultBrokerRestarted restarts a private broker node (its own node
// name, AMQP and distribution ports, data directory) under the consumer,
// so that no test disturbs the machine's shared broker.
//
// The restart must happen while claims are outstanding, or there is
// nothing to test: on a fast machine all 100 claims drained before
// rabbitmqctl stop took effect. So the partner's gate holds every call
// after 25 accepted claims; the node is stopped only once the consumer's
// calls are held (its prefetch's worth unacked at the broker), and the
// gate opens only after the consumer has reconnected to the restarted
// node. The held claims' 201s then arrive after their channel died: each
// is recorded but cannot be acked, and its redelivered copy meets the
// record, so no claim reaches the partner twice. Serial, as every test
// with a private node on a fixed port (docs/tests.md).
func TestFaultBrokerRestarted(t *testing.T) {
	const (
		node, port = "eaimqfault@localhost", 5698
		prefetch   = 5
		holdAfter  = 25
	)
	up, stop := brokertest.PrivateNode(t, node, port)
	w, ctl := onNode(t, node, port)
	srv := newPartnerServer(t, w.partner)
	t.Cleanup(w.partner.Release) // runs before the server's Close, which waits for held calls
	w.url = srv
	if r := w.run("topology"); r.code != 0 {
		t.Fatalf("topology: %s", r.stderr)
	}
	held := holdAfter
	w.partner.Set(claimsys.Control{HoldAfter: &held})
	published := w.publishFiles(brokertest.Claims("restart", "C-rs", 100, true)...)
	// --http-timeout well beyond the restart: the held calls must still be
	// waiting for their answer when the gate opens, not time out into a
	// retry (a different fault, with its own bound: TestFaultPartnerSlowerThanTimeout).
	p := w.start("consumer", "--claim", w.url, "--max-seconds", "240", "--prefetch", fmt.Sprint(prefetch), "--http-timeout", "200s")

	// The gate: a full prefetch of calls held, so that many claims are
	// delivered, unacked, when the node goes.
	brokertest.Eventually(t, 60*time.Second, fmt.Sprintf("%d calls held after %d accepted", prefetch, holdAfter), func() bool {
		if p.exited() {
			t.Fatalf("consumer exited: %s", p.errb.String())
		}
		return w.partner.Held() == prefetch
	})
	if q := w.vh.Queues(t)[topo.Queue]; q.Unacked != prefetch {
		t.Fatalf("claim.in: %d unacked with %d calls held, want %d", q.Unacked, prefetch, prefetch)
	}
	if n := len(w.partner.Stats().Accepted); n != holdAfter {
		t.Fatalf("%d claims accepted before the gate closed, want %d", n, holdAfter)
	}

	stop()
	// Really down: the node does not answer rabbitmqctl, its AMQP port
	// refuses, and the consumer has seen its connection go.
	brokertest.Eventually(t, 60*time.Second, "the private node down", func() bool {
		if _, err := ctl.Run(context.Background(), "-q", "status"); err == nil {
			return false
		}
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return false
		}
		return strings.Contains(p.errb.String(), "connection lost")
	})
	if h := w.partner.Held(); h != prefetch {
		t.Fatalf("%d calls held while the node was down, want %d", h, prefetch)
	}

	up()
	brokertest.Eventually(t, 90*time.Second, "the consumer reconnected", func() bool {
		if p.exited() {
			t.Fatalf("consumer exited: %s", p.errb.String())
		}
		return strings.Contains(p.errb.String(), "reconnected")
	})
	w.partner.Release()

	brokertest.Eventually(t, 90*time.Second, "all delivered after the restart", func() bool {
		if p.exited() {
			t.Fatalf("consumer exited: %s", p.errb.String())
		}
		q := w.vh.Queues(t)[topo.Queue]
		return len(w.partner.Stats().Accepted) == len(published) && q.Messages == 0 && q.Unacked == 0
	})
	p.stop(t)
	// Each held claim was answered after its channel died: recorded, not
	// acked. Fewer would mean the fault missed them.
	if n := strings.Count(p.errb.String(), "recorded but not acked"); n != prefetch {
		t.Errorf("%d held claims recorded but not acked after the restart, want %d:\n%s", n, prefetch, p.errb.String())
	}
	w.account("broker node restarted mid-run (private node)", published, 0, "0",
		fmt.Sprintf("%d calls held across the restart; their 201s came after the channel died, the redelivered copies met the record", prefetch))
}

// TestPublishAgainstBlockedBroker: a memory alarm on a private node makes
// the broker stop reading from publishers. publish must not hang: it exits
// 75 after -timeout (plus a bounded close), says the outcome is unknown,
// and names the alarm. Serial: a private node on a fixed port, and a
// bound on publish's time.
func TestPublishAgainstBlockedBroker(t *testing.T) {
	node, port := "eaimqalarm@localhost", 5697
	brokertest.PrivateNode(t, node, port)
	w, ctl := onNode(t, node, port)
	if r := w.run("topology"); r.code != 0 {
		t.Fatalf("topology: %s", r.stderr)
	}
	if _, err := ctl.Run(context.Background(), "-q", "set_vm_memory_high_watermark", "absolute", "1MiB"); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 15*time.Second, "memory alarm on", func() bool {
		out, _ := ctl.Run(context.Background(), "-q", "eval", "rabbit_alarm:get_alarms().")
		return strings.Contains(string(out), "memory")
	})
	f := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(f, brokertest.Claim("blocked-1", "C-B", "r.pdf"), 0o644)
	r := w.run("publish", "-timeout", "2s", f)
	if r.code != 75 || !strings.Contains(r.stderr, "may or may not be queued") || !strings.Contains(r.stderr, "blocking publishers") {
		t.Errorf("exit %d, want 75 naming the alarm:\n%s", r.code, r.stderr)
	}
	// -timeout, then at most 2 s for the bounded close, and slack for a
	// loaded machine.
	if r.took > 2*time.Second+2*time.Second+4*time.Second {
		t.Errorf("publish took %s with -timeout 2s", r.took)
	}

	// A batch larger than the socket's buffers: the broker reads the
	// first publish and then stops, so publish's write blocks with no
	// confirm wait reached. The write's own bound (-timeout) closes the
	// connection under it: exit 75, every claim accounted for.
	dir := t.TempDir()
	pad := strings.Repeat("x", 1<<20)
	var files []string
	for i := range 48 {
		f := filepath.Join(dir, fmt.Sprintf("big-%02d.json", i))
		os.WriteFile(f, fmt.Appendf(nil, `{"guid":"blocked-big-%02d","claimId":"C-BB%02d","docs":["r.pdf"],"pad":%q}`, i, i, pad), 0o644)
		files = append(files, f)
	}
	r = w.run("publish", append([]string{"-timeout", "2s", "-json"}, files...)...)
	if r.code != 75 || !strings.Contains(r.stderr, "stopped reading") || !strings.Contains(r.stderr, "blocking publishers") {
		t.Errorf("48 claims of 1 MiB: exit %d, want 75 saying the broker stopped reading under its alarm:\n%s", r.code, r.stderr)
	}
	var sum struct {
		Sent        int `json:"sent"`
		Unconfirmed int `json:"unconfirmed"`
		NotSent     int `json:"not_sent"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil || sum.Sent+sum.Unconfirmed+sum.NotSent != len(files) || sum.Unconfirmed == 0 {
		t.Errorf("summary %q does not account for %d claims with some unconfirmed (%v)", r.stdout, len(files), err)
	}
	if r.took > 2*time.Second+2*time.Second+4*time.Second {
		t.Errorf("48 claims of 1 MiB: publish took %s with -timeout 2s", r.took)
	}
}
