package partition

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/pgtest"
	"eaimq/internal/rabbitctl"
	"eaimq/internal/retry"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// delays are the consumers' --retry-delays: a BUSY claim's lineage is
// 1 + 2 calls, then claim.dead.
const delays = "1s,3s"

// lineageCalls is the calls of one lineage of a BUSY claim.
const lineageCalls = 1 + 2

// Nemeses are the faults of issue 32, by the names partitions.sh takes.
var Nemeses = []string{"isolate-one", "isolate-in-leader", "isolate-dead-leader", "flap", "partition-kill"}

// config is what partitions.sh passes in the environment.
type config struct {
	op       []string // the command for the nemeses: partitions.sh _op
	nodes    []string // the nodes' addresses, node 1 first
	version  string
	store    string // mnesia or khepri
	nemeses  []string
	runs     int
	seconds  time.Duration
	report   string
	logDir   string
	minFault time.Duration // a partition lasts minFault to maxFault
	maxFault time.Duration
}

func configFromEnv(t *testing.T) config {
	op := os.Getenv("EAIMQ_PART_OP")
	if op == "" {
		t.Skip("TestPartitions runs under scripts/partitions.sh, which builds the cluster in network namespaces (as root)")
	}
	c := config{op: strings.Fields(op), nodes: strings.Split(os.Getenv("EAIMQ_PART_NODES"), ","),
		version: os.Getenv("EAIMQ_PART_VERSION"), store: os.Getenv("EAIMQ_PART_STORE"),
		nemeses: strings.Fields(os.Getenv("EAIMQ_PART_NEMESES")), report: os.Getenv("EAIMQ_PART_REPORT"),
		logDir: os.Getenv("EAIMQ_PART_LOGS"), minFault: 10 * time.Second, maxFault: 30 * time.Second}
	var err error
	if c.runs, err = strconv.Atoi(os.Getenv("EAIMQ_PART_RUNS")); err != nil || c.runs < 1 {
		t.Fatalf("EAIMQ_PART_RUNS %q: want a count", os.Getenv("EAIMQ_PART_RUNS"))
	}
	s, err := strconv.Atoi(os.Getenv("EAIMQ_PART_SECONDS"))
	if err != nil || s < 30 {
		t.Fatalf("EAIMQ_PART_SECONDS %q: want 30 or more", os.Getenv("EAIMQ_PART_SECONDS"))
	}
	c.seconds = time.Duration(s) * time.Second
	if s < 120 {
		// The short run: partitions long enough to be noticed (net_ticktime
		// 10 s), short enough for two of them in the run.
		c.maxFault = 15 * time.Second
	}
	if len(c.nodes) != 3 {
		t.Fatalf("EAIMQ_PART_NODES %q: want three addresses", os.Getenv("EAIMQ_PART_NODES"))
	}
	for _, n := range c.nemeses {
		if !slices.Contains(Nemeses, n) {
			t.Fatalf("unknown nemesis %q; known: %s", n, strings.Join(Nemeses, ", "))
		}
	}
	if c.logDir == "" {
		c.logDir = t.TempDir()
	}
	return c
}

// TestPartitions runs each nemesis EAIMQ_PART_RUNS times, each run on a
// vhost, a PostgreSQL database and a partner of its own, and appends one
// row per run to EAIMQ_PART_REPORT.
func TestPartitions(t *testing.T) {
	cfg := configFromEnv(t)
	bins := map[string]string{}
	for _, p := range []string{"publish", "consumer", "topology"} {
		bins[p] = brokertest.Binary(t, "eaimq/"+p)
	}
	for _, nem := range cfg.nemeses {
		for i := 1; i <= cfg.runs; i++ {
			t.Run(fmt.Sprintf("%s/%d", nem, i), func(t *testing.T) {
				r := newRun(t, cfg, bins, nem, i)
				r.run()
				row := r.account()
				if cfg.report != "" {
					f, err := os.OpenFile(cfg.report, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					fmt.Fprintln(f, row)
				}
			})
		}
	}
}

// run is one run's world.
type run struct {
	t       *testing.T
	cfg     config
	bins    map[string]string
	nemesis string
	name    string
	vh      *brokertest.VHost
	urls    []string // the vhost on each node
	db      string
	partner *claimsys.Server
	ep      *claimsys.Endpoint
	dir     string // claim files
	logs    string // the consumers' logs

	mu          sync.Mutex
	kind        map[string]string // good, nodocs, busy
	copies      map[string]int    // publish attempts that may have queued the claim: confirmed or unknown
	confirmed   map[string]bool
	unknown     map[string]bool   // had an unknown outcome (publish exit 75) at least once
	pending     map[string]string // guid → file, to publish again
	publishes   int
	exits       map[int]int // publish's exit codes
	slowest     time.Duration
	hung        int
	faults      []string
	cons        []*consumer
	restarts    int
	reconnects  []time.Duration // consumers on a cut node: cut → reconnected elsewhere
	heldThrough int             // consumers on a cut node that did not reconnect before the heal
}

func newRun(t *testing.T, cfg config, bins map[string]string, nemesis string, i int) *run {
	r := &run{t: t, cfg: cfg, bins: bins, nemesis: nemesis, name: fmt.Sprintf("%s-%d", nemesis, i),
		kind: map[string]string{}, copies: map[string]int{}, confirmed: map[string]bool{}, unknown: map[string]bool{},
		pending: map[string]string{}, exits: map[int]int{}, dir: t.TempDir()}
	r.logs = filepath.Join(cfg.logDir, cfg.version+"-"+cfg.store+"-"+r.name)
	if err := os.MkdirAll(r.logs, 0o700); err != nil {
		t.Fatal(err)
	}
	r.awaitWhole(180 * time.Second)
	r.vh = brokertest.NewOn(t, r.ctl(1), "amqp://guest:guest@"+cfg.nodes[0]+":5672/")
	for _, n := range cfg.nodes {
		r.urls = append(r.urls, strings.Replace(r.vh.URL, "@"+cfg.nodes[0]+":", "@"+n+":", 1))
	}
	r.vh.URL = strings.Join(r.urls, ",")
	r.db = pgtest.New(t)
	r.partner = claimsys.New()
	ep, err := claimsys.Serve(r.partner, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ep.Close)
	r.ep = ep
	d := 10
	r.partner.Set(claimsys.Control{DelayMS: &d})
	if out, code := r.exec(60*time.Second, r.env(0), "topology", "-queue-type", "quorum", "-retry-delays", delays); code != 0 {
		t.Fatalf("topology: exit %d: %s", code, out)
	}
	return r
}

// ctl is rabbitmqctl against node n (1-based), run in its namespace.
func (r *run) ctl(n int) rabbitctl.Ctl {
	return rabbitctl.Ctl{Cmd: append(slices.Clone(r.cfg.op), "ctl", strconv.Itoa(n))}
}

// op runs a nemesis verb of partitions.sh.
func (r *run) op(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.cfg.op[0], append(slices.Clone(r.cfg.op[1:]), args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// env is the environment of a program whose EAI_AMQP_URL lists the nodes
// beginning with node first (0-based): consumers on several hosts, each
// with its own nearest node, fail over along the rest.
func (r *run) env(first int) []string {
	rotated := append(slices.Clone(r.urls[first:]), r.urls[:first]...)
	return append(os.Environ(), broker.EnvURL+"="+strings.Join(rotated, ","), store.EnvPath+"="+r.db)
}

// exec runs a program to its end, killed after timeout; code -1 means it
// had to be killed.
func (r *run) exec(timeout time.Duration, env []string, name string, args ...string) (string, int) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bins[name], args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(out), -1
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		r.t.Fatalf("%s: %v", name, err)
	}
	return string(out), 0
}

// --- the cluster's health --------------------------------------------

// whole reports whether every node runs its app and sees all three
// running, with no partition recorded.
func (r *run) whole() bool {
	for n := 1; n <= 3; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := r.ctl(n).Run(ctx, "-q", "eval",
			`{rabbit:is_running(), length(rabbit_nodes:all_running()), rabbit_node_monitor:partitions()}.`)
		cancel()
		if err != nil || strings.TrimSpace(string(out)) != "{true,3,[]}" {
			return false
		}
	}
	return true
}

// awaitWhole waits for the cluster to be whole again after a heal. A
// node that stays out of it is the broker's problem, not the relay's,
// but the run cannot go on without it: it fails the run.
//
// Past half of limit, the nodes that still record a partition or do not
// run their app get their app restarted, as the RabbitMQ manual has an
// operator do: pause_minority recovers by itself only when a node was in
// the minority, and a flap's disconnect between two nodes, each still
// seeing the third, leaves Mnesia's partition recorded on both.
func (r *run) awaitWhole(limit time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(limit)
	nudge := time.Now().Add(limit / 2)
	for !r.whole() {
		if time.Now().After(deadline) {
			r.t.Fatalf("the cluster is not whole %s after the heal", limit)
		}
		if !nudge.IsZero() && time.Now().After(nudge) {
			nudge = time.Time{}
			for n := 1; n <= 3; n++ {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				out, err := r.ctl(n).Run(ctx, "-q", "eval", `{rabbit:is_running(), rabbit_node_monitor:partitions()}.`)
				cancel()
				if err == nil && strings.TrimSpace(string(out)) == "{true,[]}" {
					continue
				}
				r.faults = append(r.faults, fmt.Sprintf("node %d still partitioned %s after the heal (%s): its app restarted", n, limit/2, strings.TrimSpace(string(out))))
				for _, verb := range []string{"stop_app", "start_app"} {
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
					r.ctl(n).Run(ctx, "-q", verb)
					cancel()
				}
			}
		}
		time.Sleep(2 * time.Second)
	}
}

// leader is the node (1-based) holding queue's Raft leader, asked of the
// first node that answers.
func (r *run) leader(queue string) int {
	// Right after a heal or a restart a queue may have no leader for a
	// while (an election): ask again for up to a minute.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		if n := r.leaderNow(queue); n > 0 {
			return n
		}
	}
	r.t.Fatalf("no node names %s's leader", queue)
	return 0
}

func (r *run) leaderNow(queue string) int {
	for n := 1; n <= 3; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := r.ctl(n).Run(ctx, "-q", "list_queues", "-p", r.vh.Name, "--formatter", "json", "name", "leader")
		cancel()
		if err != nil {
			continue
		}
		var rows []struct {
			Name   string `json:"name"`
			Leader string `json:"leader"`
		}
		if json.Unmarshal(out, &rows) != nil {
			continue
		}
		for _, row := range rows {
			if row.Name != queue {
				continue
			}
			for i, ip := range r.cfg.nodes {
				if row.Leader == "rabbit@"+ip {
					return i + 1
				}
			}
		}
	}
	return 0
}

// --- the workload ----------------------------------------------------

// publishing runs two publishers until stop is called: each publishes
// batches of ten new claims (80% good, 10% without documents, 10% BUSY)
// after the claims still pending from its earlier batches.
func (r *run) publishing() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				select {
				case <-done:
					return
				case <-time.After(time.Duration(100+rand.IntN(200)) * time.Millisecond):
				}
				r.publishBatch(w, r.newClaims(w, seq))
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

func (r *run) newClaims(w, seq int) []string {
	var files []string
	for i := range 10 {
		guid := fmt.Sprintf("%s-%d-%05d-%d", r.name, w, seq, i)
		kind, claimID, docs := "good", "C-"+guid, []string{"r.pdf"}
		switch x := rand.IntN(100); {
		case x < 10:
			kind, docs = "nodocs", nil
		case x < 20:
			kind, claimID = "busy", "BUSY-"+guid
		}
		f := filepath.Join(r.dir, guid+".json")
		if err := os.WriteFile(f, brokertest.Claim(guid, claimID, docs...), 0o600); err != nil {
			r.t.Error(err)
			continue
		}
		r.mu.Lock()
		r.kind[guid] = kind
		r.mu.Unlock()
		files = append(files, f)
	}
	return files
}

// stallAfter is the consumers' --stall-after: a consumer whose node is
// cut off and stays up (Khepri has no pause_minority) connects to another
// node within 1.75 times it (14 s), inside the nemeses' cuts of 10 to 30
// s. (With 15 s, 26 s: most cuts healed first, and the consumers stayed.)
const stallAfter = 8 * time.Second

// publishTimeout is publish's -timeout: the wait for a confirm.
const publishTimeout = 5 * time.Second

// publishHang is when a publish run counts as hung: -timeout for the
// connection and again for the confirms, the bounded close, and slack
// for a loaded machine.
const publishHang = 4*publishTimeout + 20*time.Second

// publishBatch publishes files, after the pending claims (taken from the
// pending set so that the other publisher does not send them too).
// Whatever is not confirmed goes back to pending; a claim whose outcome
// is unknown (published, no confirm) counts as a copy that may be queued.
func (r *run) publishBatch(w int, files []string) {
	r.mu.Lock()
	limit := 20 // beside ten new claims: a batch stays small under faults
	if files == nil {
		limit = len(r.pending) // the final publish, on a whole cluster
	}
	var again []string
	for g, f := range r.pending {
		if len(again) == limit {
			break
		}
		again = append(again, f)
		delete(r.pending, g)
	}
	r.mu.Unlock()
	files = append(again, files...)
	if len(files) == 0 {
		return
	}
	start := time.Now()
	out, code := r.exec(publishHang, r.env(w%3), "publish", append([]string{"-json", "-timeout", publishTimeout.String(), "-progress", "never"}, files...)...)
	took := time.Since(start)
	var sum struct {
		Failures []struct {
			File, Guid, Reason string
		} `json:"failures"`
	}
	line := out
	if i := strings.LastIndex(out, `{"sent"`); i >= 0 {
		line = out[i:]
		if j := strings.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
	}
	parsed := json.Unmarshal([]byte(line), &sum) == nil
	r.mu.Lock()
	defer r.mu.Unlock()
	r.publishes++
	r.exits[code]++
	r.slowest = max(r.slowest, took)
	switch code {
	case 0, 69, 75:
	case 4:
		// A nack is a definite outcome (not queued): on 3.10 a quorum
		// queue without a leader nacks. The claim is published again.
	case -1:
		r.hung++
		r.t.Errorf("publish hung: killed after %s (-timeout %s)", publishHang, publishTimeout)
	default:
		r.t.Errorf("publish: exit %d: %s", code, out)
	}
	failed := map[string]bool{}
	if code != 0 && !parsed {
		// No summary (killed): every claim is in doubt and sent again.
		for _, f := range files {
			g := strings.TrimSuffix(filepath.Base(f), ".json")
			failed[g] = true
			r.copies[g]++
			r.unknown[g] = true
			r.pending[g] = f
		}
	}
	for _, fl := range sum.Failures {
		failed[fl.Guid] = true
		r.pending[fl.Guid] = fl.File
		if strings.Contains(fl.Reason, "may or may not be queued") {
			r.copies[fl.Guid]++
			r.unknown[fl.Guid] = true
		}
	}
	for _, f := range files {
		g := strings.TrimSuffix(filepath.Base(f), ".json")
		if !failed[g] {
			r.confirmed[g] = true
			r.copies[g]++
		}
	}
}

// consumer is one consumer process, restarted when it exits.
type consumer struct {
	first int // its nearest node, 0-based
	cmd   *exec.Cmd
	log   string
	done  chan struct{}
}

func (r *run) startConsumer(first int) *consumer {
	r.mu.Lock()
	n := r.restarts
	r.mu.Unlock()
	log := filepath.Join(r.logs, fmt.Sprintf("consumer%d-%d.log", first+1, n))
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		r.t.Fatal(err)
	}
	c := &consumer{first: first, log: log, done: make(chan struct{})}
	c.cmd = exec.Command(r.bins["consumer"], "--claim", r.ep.URL(), "--retry-delays", delays, "--prefetch", "5",
		"--max-seconds", "3600", "--http-timeout", "10s", "--log-level", "info", "--stall-after", stallAfter.String())
	c.cmd.Env = r.env(first)
	// Killed with the test process: partitions.sh's trap kills that on a
	// signal, and a consumer left behind would outlive its namespaces.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.cmd.Stdout, c.cmd.Stderr = f, f
	if err := c.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() { c.cmd.Wait(); f.Close(); close(c.done) }()
	r.t.Cleanup(func() { c.cmd.Process.Kill(); <-c.done })
	return c
}

func (c *consumer) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// watchConsumers restarts a consumer that exited (an exit is not a
// failure by itself: its claims go back to the queue), until stop.
func (r *run) watchConsumers() (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Second):
			}
			r.mu.Lock()
			cons := slices.Clone(r.cons)
			r.mu.Unlock()
			for i, c := range cons {
				if c.exited() {
					r.t.Logf("consumer %d exited (%v); started again", c.first+1, c.cmd.ProcessState)
					r.mu.Lock()
					r.restarts++
					r.mu.Unlock()
					nc := r.startConsumer(c.first)
					r.mu.Lock()
					r.cons[i] = nc
					r.mu.Unlock()
				}
			}
		}
	}()
	return func() { close(done); <-stopped }
}

var logTime = regexp.MustCompile(`^time=(\S+) .*msg=(consuming|reconnected) .*node=(\d+\.\d+\.\d+\.\d+):`)

// nodeAt reads a consumer's log: the node it was on at time at, and when
// it next connected to another node after at (zero: not yet).
func nodeAt(log string, at time.Time) (node string, moved time.Time) {
	f, err := os.Open(log)
	if err != nil {
		return "", time.Time{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := logTime.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		if !ts.After(at) {
			node = m[3]
			continue
		}
		if m[3] != node && node != "" {
			return node, ts
		}
	}
	return node, time.Time{}
}

// --- the nemeses -----------------------------------------------------

func (r *run) faultLength() time.Duration {
	return r.cfg.minFault + time.Duration(rand.Int64N(int64(r.cfg.maxFault-r.cfg.minFault)+1))
}

// isolate cuts node n off from the other two for d, then heals, and
// measures how the consumers on n fared: each must connect to another
// node while n is cut off (its claims are then back in the majority's
// queue for the others), not go on holding what it cannot ack.
func (r *run) isolate(n int, d time.Duration, during func()) {
	at := time.Now()
	r.mu.Lock()
	var on []*consumer
	for _, c := range r.cons {
		if node, _ := nodeAt(c.log, at); node == r.cfg.nodes[n-1] {
			on = append(on, c)
		}
	}
	r.mu.Unlock()
	if err := r.op("isolate", strconv.Itoa(n)); err != nil {
		r.t.Fatal(err)
	}
	if during != nil {
		during()
	}
	time.Sleep(d - time.Since(at))
	for _, c := range on {
		if _, moved := nodeAt(c.log, at); !moved.IsZero() {
			r.reconnects = append(r.reconnects, moved.Sub(at))
		} else {
			r.heldThrough++
		}
	}
	if err := r.op("heal"); err != nil {
		r.t.Fatal(err)
	}
	r.faults = append(r.faults, fmt.Sprintf("node %d cut off %.0fs (%d consumers on it)", n, d.Seconds(), len(on)))
}

// fault runs one round of the nemesis, healed before it returns.
func (r *run) fault(round int) {
	d := r.faultLength()
	switch r.nemesis {
	case "isolate-one":
		r.isolate(1+rand.IntN(3), d, nil)
	case "isolate-in-leader":
		r.isolate(r.leader(topo.Queue), d, nil)
	case "isolate-dead-leader":
		// The 422s (10% of claims) are being dead-lettered all along; the
		// cut falls while they are.
		r.isolate(r.leader(topo.DeadQueue), d, nil)
	case "flap":
		a := 1 + rand.IntN(3)
		b := a%3 + 1
		end := time.Now().Add(d)
		flaps := 0
		for time.Now().Before(end) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_, err := r.ctl(a).Run(ctx, "-q", "eval", fmt.Sprintf("erlang:disconnect_node('rabbit@%s').", r.cfg.nodes[b-1]))
			cancel()
			if err == nil {
				flaps++
			}
			time.Sleep(time.Duration(2000+rand.IntN(2000)) * time.Millisecond)
		}
		r.faults = append(r.faults, fmt.Sprintf("%d disconnects %d-%d in %.0fs", flaps, a, b, d.Seconds()))
	case "partition-kill":
		// claim.in's leader cut off; while it is, a node is SIGKILLed:
		// on even rounds the cut-off node itself, on odd rounds one of
		// the majority, which leaves no majority anywhere until the heal
		// and the restart.
		n := r.leader(topo.Queue)
		victim := n
		if round%2 == 1 {
			victim = n%3 + 1
		}
		r.isolate(n, d, func() {
			time.Sleep(5 * time.Second)
			if err := r.op("kill", strconv.Itoa(victim)); err != nil {
				r.t.Fatal(err)
			}
		})
		if err := r.op("start", strconv.Itoa(victim)); err != nil {
			r.t.Fatal(err)
		}
		r.faults = append(r.faults, fmt.Sprintf("node %d SIGKILLed and started again", victim))
	}
}

// run is the run itself: consumers and publishers, faults for the run's
// time with healthy gaps between them, then the heal and a final drain.
func (r *run) run() {
	for i := range 3 {
		r.cons = append(r.cons, r.startConsumer(i))
	}
	// Stopped in t.Cleanup too (after a Fatal), before the vhost and the
	// database go: a publisher or a restarted consumer outliving the run
	// would fail the next one.
	stopWatch := sync.OnceFunc(r.watchConsumers())
	r.t.Cleanup(stopWatch)
	stopPub := sync.OnceFunc(r.publishing())
	r.t.Cleanup(stopPub)
	end := time.Now().Add(r.cfg.seconds)
	for round := 0; ; round++ {
		time.Sleep(time.Duration(5+rand.IntN(6)) * time.Second)
		if time.Until(end) < r.cfg.minFault+5*time.Second {
			break
		}
		r.fault(round)
		r.awaitWhole(240 * time.Second)
	}
	time.Sleep(max(0, time.Until(end)))
	stopPub()
	r.awaitWhole(240 * time.Second)
	// The claims whose outcome was unknown, or that were not sent, are
	// published again, as an operator would after exit 75.
	for i := 0; ; i++ {
		r.mu.Lock()
		left := len(r.pending)
		r.mu.Unlock()
		if left == 0 {
			break
		}
		if i == 20 {
			r.t.Fatalf("%d claims still not confirmed after 20 publishes on a whole cluster", left)
		}
		r.publishBatch(i, nil)
	}
	plan, err := retry.Parse(delays)
	if err != nil {
		r.t.Fatal(err)
	}
	queues := []string{topo.Queue}
	for _, d := range plan.Queues() {
		queues = append(queues, retry.QueueName(d))
	}
	for nudge := 0; ; nudge++ {
		stuck := r.drain(queues, 2*time.Minute)
		if len(stuck) == 0 {
			break
		}
		if nudge == 2 {
			r.t.Fatalf("claims still in %v after two restarts of their leaders' nodes", stuck)
		}
		r.restartLeaders(stuck)
	}
	stopWatch()
	for _, c := range r.cons {
		c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.done:
		case <-time.After(60 * time.Second):
			r.t.Errorf("consumer %d did not exit within 60 s of SIGINT", c.first+1)
		}
	}
}

// drain waits up to limit for queues to hold nothing, and returns the
// queues that still hold messages none of which is ready or unacked:
// messages waiting in the broker's at-least-once dead-lettering, whose
// worker (a quorum queue client on the source queue's leader) can stay
// stuck after a partition (docs/fault-suite.md#network-partitions).
func (r *run) drain(queues []string, limit time.Duration) (stuck []string) {
	deadline := time.Now().Add(limit)
	var stuckSince time.Time // the worker resends after its own timeouts; 30 s without a ready message is past them
	for {
		qs := r.vh.Queues(r.t)
		stuck = stuck[:0]
		busy := false
		for _, name := range queues {
			q := qs[name]
			switch {
			case q.Messages == 0 && q.Unacked == 0:
			case r.ready(name) == 0 && q.Unacked == 0:
				stuck = append(stuck, name)
			default:
				busy = true
			}
		}
		if !busy && len(stuck) == 0 {
			return nil
		}
		switch {
		case busy:
			stuckSince = time.Time{}
		case stuckSince.IsZero():
			stuckSince = time.Now()
		case time.Since(stuckSince) > 30*time.Second:
			return stuck
		}
		if time.Now().After(deadline) {
			if busy {
				r.t.Fatalf("claim.in and the delay queues not drained within %s: %v", limit, qs)
			}
			return stuck
		}
		time.Sleep(time.Second)
	}
}

// ready is queue's ready count (list_queues messages counts the
// dead-letter pipeline's too).
func (r *run) ready(queue string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := r.ctl(1).Run(ctx, "-q", "list_queues", "-p", r.vh.Name, "--formatter", "json", "name", "messages_ready")
	if err != nil {
		return -1
	}
	var rows []struct {
		Name  string `json:"name"`
		Ready int    `json:"messages_ready"`
	}
	if json.Unmarshal(out, &rows) != nil {
		return -1
	}
	for _, row := range rows {
		if row.Name == queue {
			return row.Ready
		}
	}
	return -1
}

// restartLeaders restarts the app of the node leading each stuck queue,
// as an operator would: the leader moves, and the new leader's
// dead-letter worker starts afresh and sends what waits.
func (r *run) restartLeaders(stuck []string) {
	qs := r.vh.Queues(r.t)
	done := map[int]bool{}
	for _, name := range stuck {
		n := r.leader(name)
		r.faults = append(r.faults, fmt.Sprintf("dead-lettering stuck after the heal (%s: %d messages, none ready): node %d's app restarted", name, qs[name].Messages, n))
		if done[n] {
			continue
		}
		done[n] = true
		for _, verb := range []string{"stop_app", "start_app"} {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			_, err := r.ctl(n).Run(ctx, "-q", verb)
			cancel()
			if err != nil {
				r.t.Fatalf("%s on node %d: %v", verb, n, err)
			}
		}
		r.awaitWhole(3 * time.Minute)
	}
}

// lineages reads the consumers' logs: per claim, the copies that reached
// the consumers fresh (not redelivered) after the claim had been tried
// already (a first try: delivered, duplicate, rejected, or the first 503),
// the lineages of a BUSY claim (its first first try, and each later one
// not redelivered: a fresh copy starts a lineage of its own), and its
// dead-letter decisions made after a call (a redelivered copy rejected
// again from the record, with no call, is the same decision's copy).
var (
	firstTry  = regexp.MustCompile(`^time=(\S+) .*message_id=(\S+) .*redelivered=(true|false) (outcome=(delivered|duplicate|dead-lettered reason=rejected)|outcome=delayed .*retry=1 )`)
	busyFirst = regexp.MustCompile(`^time=(\S+) .*message_id=(\S+) .*redelivered=(true|false) outcome=delayed .*retry=1 `)
	busyLast  = regexp.MustCompile(`message_id=(\S+) .*outcome=dead-lettered reason=failed-twice status=`)
)

type logCounts struct {
	extra     map[string]int // fresh copies after a first try
	lineages  map[string]int // BUSY: 1 + fresh first tries after the first
	decisions map[string]int // BUSY: dead-letter decisions after a call
}

func (r *run) readLogs() logCounts {
	type try struct {
		at    string
		fresh bool
	}
	tries, busy := map[string][]try{}, map[string][]try{}
	c := logCounts{extra: map[string]int{}, lineages: map[string]int{}, decisions: map[string]int{}}
	logs, _ := filepath.Glob(filepath.Join(r.logs, "consumer*.log"))
	for _, l := range logs {
		f, err := os.Open(l)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if m := firstTry.FindStringSubmatch(line); m != nil {
				tries[m[2]] = append(tries[m[2]], try{at: m[1], fresh: m[3] == "false"})
			}
			if m := busyFirst.FindStringSubmatch(line); m != nil {
				busy[m[2]] = append(busy[m[2]], try{at: m[1], fresh: m[3] == "false"})
			}
			if m := busyLast.FindStringSubmatch(line); m != nil {
				c.decisions[m[1]]++
			}
		}
		f.Close()
	}
	later := func(ts []try) (n int) {
		slices.SortFunc(ts, func(a, b try) int { return strings.Compare(a.at, b.at) })
		for _, t := range ts[1:] {
			if t.fresh {
				n++
			}
		}
		return n
	}
	for guid, ts := range tries {
		if n := later(ts); n > 0 {
			c.extra[guid] = n
		}
	}
	for guid, ts := range busy {
		c.lineages[guid] = 1 + later(ts)
	}
	return c
}

// --- the accounting --------------------------------------------------

// row is one run's line of the report, tab-separated, in the columns
// partitions.sh adds up.
type row struct {
	nemesis, version, store                    string
	claims, recovered, lost, unexpected, twice int
	deadGood, busyMulti                        int
	bound, note                                string
}

func (w row) String() string {
	return strings.Join([]string{w.nemesis, w.version, w.store, strconv.Itoa(w.claims), strconv.Itoa(w.recovered),
		strconv.Itoa(w.lost), strconv.Itoa(w.unexpected), strconv.Itoa(w.twice), strconv.Itoa(w.deadGood),
		strconv.Itoa(w.busyMulti), w.bound, w.note}, "\t")
}

// account drains claim.dead and holds every claim against what it should
// have become: lost = confirmed − (accepted at the partner ∪ in
// claim.dead); unexpected = at the partner or in claim.dead but never
// published; a good claim called twice; a good claim dead-lettered (with
// the broker's reason); a BUSY claim with more than one lineage of calls.
func (r *run) account() row {
	dead := map[string]int{}
	why := map[string]string{}
	for _, d := range r.vh.Drain(r.t, topo.DeadQueue) {
		dead[d.MessageId]++
		why[d.MessageId] = deathReason(d)
	}
	st := r.partner.Stats()
	w := row{nemesis: r.nemesis, version: r.cfg.version, store: r.cfg.store, bound: "0"}
	busyCalls := 0 // BUSY claims called more often than their copies' lineages
	// Claims the broker queued twice though published once: each extra
	// fresh copy starts a lineage of its own (docs/safety.md), which is
	// not the relay's fork.
	logs := r.readLogs()
	brokerDups, deadExtra := 0, 0
	for guid, n := range logs.extra {
		if r.copies[guid] == 1 && n > 0 {
			brokerDups++
		}
	}
	for guid, kind := range r.kind {
		if !r.confirmed[guid] {
			if r.copies[guid] > 0 {
				r.t.Errorf("%s (%s): outcome unknown and never confirmed", guid, kind)
			}
			continue
		}
		w.claims++
		if r.unknown[guid] {
			w.recovered++
		}
		calls := st.ByGuid[guid]
		if st.Accepted[guid] == 0 && dead[guid] == 0 {
			w.lost++
			r.t.Errorf("LOST %s (%s): confirmed, but neither accepted nor dead-lettered; %d calls", guid, kind, calls)
		}
		switch kind {
		case "good":
			if calls > 1 {
				w.twice++
				r.t.Errorf("%s (good) called %d times, bound 0 (no consumer is killed: every answer is recorded before its ack)", guid, calls)
			}
			if dead[guid] > 0 {
				w.deadGood++
				r.t.Errorf("%s (good) dead-lettered: %s", guid, why[guid])
			}
		case "busy":
			// A lineage ends in one dead-letter decision; a fresh copy
			// (published again after an unknown outcome, or queued twice
			// by the broker) starts one of its own. More decisions after
			// a call than lineages is a fork. More dead copies than
			// decisions is not the relay's: at-least-once dead-lettering
			// may send one rejected copy to claim.dead twice across a
			// partition. More calls than a lineage's are not a fork
			// either: a connection lost between a 503 and its delayed
			// copy's confirm leaves the step unrecorded, and the
			// redelivered claim is called at that step again.
			if lin := max(1, logs.lineages[guid]); logs.decisions[guid] > lin {
				w.busyMulti++
				r.t.Errorf("%s (BUSY) has %d dead-letter decisions after a call in %d lineages (%d calls, %d dead copies)", guid, logs.decisions[guid], lin, calls, dead[guid])
			}
			if dead[guid] > max(1, logs.decisions[guid]) {
				deadExtra++
			}
			if calls > lineageCalls*r.copies[guid] {
				busyCalls++
			}
		}
	}
	for guid := range st.ByGuid {
		if _, ok := r.kind[guid]; !ok {
			w.unexpected++
			r.t.Errorf("UNEXPECTED %s at the partner", guid)
		}
	}
	for guid := range dead {
		if _, ok := r.kind[guid]; !ok {
			w.unexpected++
			r.t.Errorf("UNEXPECTED %s in claim.dead", guid)
		}
	}
	var recon string
	if len(r.reconnects) > 0 {
		recon = fmt.Sprintf("; consumers on a cut node reconnected elsewhere after at most %.0fs (%d times)",
			slices.Max(r.reconnects).Seconds(), len(r.reconnects))
	}
	if r.heldThrough > 0 {
		recon += fmt.Sprintf("; %d stayed on a cut node until the heal", r.heldThrough)
	}
	codes := make([]string, 0, len(r.exits))
	for c, n := range r.exits {
		codes = append(codes, fmt.Sprintf("%d×%d", n, c))
	}
	slices.Sort(codes)
	w.note = fmt.Sprintf("%.0fs; %s; publish runs %d (exit %s, slowest %.1fs); consumer restarts %d%s; BUSY claims called beyond one lineage per copy %d; claims published once and queued twice by the broker %d; BUSY claims with more dead copies than dead-letter decisions %d",
		r.cfg.seconds.Seconds(), strings.Join(r.faults, ", "), r.publishes, strings.Join(codes, " "), r.slowest.Seconds(), r.restarts, recon, busyCalls, brokerDups, deadExtra)
	r.t.Logf("%s", w)
	return w
}

// deathReason is the broker's x-death reason of a dead letter, with the
// relay's own header when it set one.
func deathReason(d amqp.Delivery) string {
	var reasons []string
	if xs, ok := d.Headers["x-death"].([]any); ok {
		for _, x := range xs {
			if t, ok := x.(amqp.Table); ok {
				reasons = append(reasons, fmt.Sprint(t["reason"]))
			}
		}
	}
	for _, h := range []string{"x-eaimq-reason", "x-first-death-reason"} {
		if v, ok := d.Headers[h]; ok {
			reasons = append(reasons, fmt.Sprintf("%s=%v", h, v))
		}
	}
	return strings.Join(reasons, ",")
}
