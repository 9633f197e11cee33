package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/claim"
	"eaimq/internal/claimsys"
	"eaimq/internal/relay"
	"eaimq/internal/retry"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// The engine's tests drive relay.Run with a Config, as the consumer
// program does after its flags, against the real broker (a temporary vhost
// with the contract's topology), the claim-system stand-in over HTTP, and
// a dedup store file of the test's own. The program's flags and wiring are
// tested in consumer/.

// world is one test's broker, partner and store.
type world struct {
	t       testing.TB
	vh      *brokertest.VHost
	partner *claimsys.Server
	claims  string // the stand-in's .../v1/claims
	db      string
}

func newWorld(t testing.TB) *world {
	t.Helper()
	vh := brokertest.New(t)
	vh.Topology(t)
	p := claimsys.New()
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return &world{t: t, vh: vh, partner: p, claims: srv.URL + "/v1/claims", db: filepath.Join(t.TempDir(), "processed.db")}
}

// config is a run as the consumer's defaults make it: prefetch 5, only 201
// delivered, the lab's requeue-once rule, a summary in JSON.
func (w *world) config() relay.Config {
	return relay.Config{
		URL: w.vh.URL, Getenv: w.vh.Getenv(nil), Claims: w.claims,
		Prefetch: 5, HTTPTimeout: 10 * time.Second, Accept: relay.AcceptSet{201},
		Store: w.db, Sync: "full", JSON: true,
	}
}

// withDelays declares the delay queues of delays, of type kind (as
// topology -retry-delays does), and sets the plan in cfg.
func (w *world) withDelays(cfg *relay.Config, kind topo.QueueType, delays ...time.Duration) {
	w.t.Helper()
	ch := w.vh.Channel(w.t)
	for _, d := range delays {
		if err := topo.DeclareQueue(ch, topo.RetryQueue(kind, retry.QueueName(d), d)); err != nil {
			w.t.Fatal(err)
		}
	}
	cfg.Retry = &retry.Plan{Delays: delays}
}

// run is one relay.Run in this process.
type run struct {
	stop   context.CancelFunc // the first signal
	kill   context.CancelFunc // the second
	done   chan struct{}
	err    error
	stdout brokertest.Buffer
	log    brokertest.Buffer // cfg.Log's lines, as text
}

// start runs the relay with cfg (its Log writes to the run's log) until
// stopped; t.Cleanup abandons it if the test has not.
func (w *world) start(cfg relay.Config) *run {
	hard, kill := context.WithCancel(context.Background())
	soft, stop := context.WithCancel(hard)
	r := &run{stop: stop, kill: kill, done: make(chan struct{})}
	cfg.Log = slog.New(slog.NewTextHandler(&r.log, nil))
	go func() {
		defer close(r.done)
		r.err = relay.Run(soft, hard, cfg, &r.stdout, &r.log)
	}()
	w.t.Cleanup(func() { kill(); <-r.done })
	return r
}

// wait stops the run (as the first signal does) and waits for its end.
func (r *run) wait(t testing.TB) {
	t.Helper()
	r.stop()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not end within 30s of the stop")
	}
	if r.err != nil {
		t.Fatalf("the run ended with %v:\n%s", r.err, r.log.String())
	}
}

// runUntil runs the relay until cond holds (or fails the test), then stops
// it and returns it.
func (w *world) runUntil(cfg relay.Config, what string, cond func() bool) *run {
	w.t.Helper()
	r := w.start(cfg)
	brokertest.Eventually(w.t, 30*time.Second, what, func() bool {
		select {
		case <-r.done:
			w.t.Fatalf("the relay ended early with %v:\n%s", r.err, r.log.String())
		default:
		}
		return cond()
	})
	r.wait(w.t)
	return r
}

// summary is the run's JSON summary.
func (r *run) summary(t testing.TB) relay.Summary {
	t.Helper()
	var s relay.Summary
	if err := json.Unmarshal([]byte(r.stdout.String()), &s); err != nil {
		t.Fatalf("summary: %v: %q", err, r.stdout.String())
	}
	return s
}

// assertQueues: brokertest's AssertQueues on this world's vhost.
func (w *world) assertQueues(in, unacked, dead int) {
	w.t.Helper()
	w.vh.AssertQueues(w.t, in, unacked, dead)
}

func (w *world) drained() bool { return w.vh.Drained(w.t) }

func (w *world) calls(guid string) int { return w.partner.Stats().ByGuid[guid] }

func (w *world) totalCalls() int { return w.partner.Stats().Total }

// record is the store's record of id.
func (w *world) record(id string) claim.Record {
	w.t.Helper()
	st, err := store.Open(w.db, store.Options{ReadOnly: true})
	if err != nil {
		w.t.Fatal(err)
	}
	defer st.Close()
	rec, _, err := st.Get(context.Background(), id)
	if err != nil {
		w.t.Fatal(err)
	}
	return rec
}

// runOnce is one relay.Run to its end, in the caller's goroutine (cfg
// should end it: MaxRun, or a refusal at start); its log goes to log.
func runOnce(ctx context.Context, cfg relay.Config, stdout, log io.Writer) error {
	cfg.Log = slog.New(slog.NewTextHandler(log, nil))
	return relay.Run(ctx, ctx, cfg, stdout, log)
}

func guids(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%03d", prefix, i))
	}
	return out
}

func claimsysDelay(ms int) claimsys.Control { return claimsys.Control{DelayMS: &ms} }

func force(status int) claimsys.Control { return claimsys.Control{ForceStatus: &status} }
