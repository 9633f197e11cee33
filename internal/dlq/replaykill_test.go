package dlq

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
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

// envReplayChild makes the test binary a replay process of its own
// (TestReplayChild) for the row it names, which the parent SIGKILLs.
const envReplayChild = "EAIMQ_TEST_REPLAY_CHILD"

// TestReplayChild is not a test: it is the process
// TestReplayRowsKilledBetweenConfirmAndMark kills. It replays the row
// named by envReplayChild from EAI_MQ_DB's store to EAI_AMQP_URL and,
// once the broker has confirmed the copy and before the row is marked,
// says "confirmed" on stdout and blocks until it is killed.
func TestReplayChild(t *testing.T) {
	id := os.Getenv(envReplayChild)
	if id == "" {
		return // run by the parent only
	}
	die := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	st, err := store.Open(os.Getenv(store.EnvPath), store.Options{})
	if err != nil {
		die(err)
	}
	conn, err := amqp.Dial(os.Getenv(broker.EnvURL))
	if err != nil {
		die(err)
	}
	b, err := NewIngestedBrowser(conn, st)
	if err != nil {
		die(err)
	}
	c := Config{IDs: []string{id}, MaxReplays: DefaultMaxReplays, Actor: Actor{Who: "killed", Via: "dlq replay"}}
	c.Hooks.AfterConfirm = func() error {
		fmt.Println("confirmed")
		select {}
	}
	err = Replay(context.Background(), b, c, io.Discard, os.Stderr)
	fmt.Fprintln(os.Stderr, "Replay returned:", err)
	os.Exit(4)
}

// TestReplayRowsKilledBetweenConfirmAndMark, the fault row: a replay
// process SIGKILLed after the broker confirmed its copy and before it
// marked the row. Nothing of it runs after the kill: the row stays
// replaying (a plain replay skips it: its copy may be out), replay -force
// past the lease sends it again (at most one extra publish), and the
// consumer's dedup absorbs the extra copy: the partner is called once.
func TestReplayRowsKilledBetweenConfirmAndMark(t *testing.T) {
	for _, be := range ingestBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newIngestWorld(t, be.loc(t))
			w.putRows(t, "kill", 1)
			const id = "kill-000"

			// The gate: the child has its confirm and waits before the
			// mark; the copy is in claim.in and the row is replaying.
			child := startGatedChild(t, "TestReplayChild", "confirmed",
				envReplayChild+"="+id, broker.EnvURL+"="+w.vh.URL, store.EnvPath+"="+w.loc)
			if n := w.vh.Depth(t, topo.Queue); n != 1 {
				t.Fatalf("claim.in holds %d at the gate, want the confirmed copy", n)
			}
			child.kill(t)
			if r := w.row(t, id); r.State != deadletter.StateReplaying {
				t.Fatalf("the row is %q after the kill, want replaying", r.State)
			}

			// A replay without -force leaves it: its copy is out.
			_, text, err := w.replayRows(t, Config{IDs: []string{id}})
			if err != nil || !strings.Contains(text, "skipped "+id+": replaying since") {
				t.Errorf("replay of the row left replaying: %v\n%s", err, text)
			}
			// -force past the lease: the one extra publish.
			_, text, err = w.replayRows(t, Config{IDs: []string{id}, Force: true, ReplayLease: time.Nanosecond})
			if err != nil || !strings.Contains(text, "replayed "+id) {
				t.Fatalf("replay -force of the row left replaying: %v\n%s", err, text)
			}
			if n := w.vh.Depth(t, topo.Queue); n != 2 {
				t.Fatalf("claim.in holds %d, want 2 (the killed replay's copy and the one extra)", n)
			}
			if r := w.row(t, id); r.State != deadletter.StateReplayed {
				t.Errorf("the row is %q, want replayed", r.State)
			}

			p := claimsys.New()
			srv := httptest.NewServer(p)
			defer srv.Close()
			runConsumer(t, w.vh, srv.URL, w.loc)
			if !w.vh.Drained(t) {
				t.Fatalf("claim.in not drained: %+v", w.vh.Queues(t)[topo.Queue])
			}
			if n := p.Stats().ByGuid[id]; n != 1 {
				t.Errorf("the partner was called %d times for %s, want once", n, id)
			}
		})
	}
}

// gatedChild is the test binary run as a process of its own (one of the
// Test*Child functions), stopped at a gate it announces on stdout.
type gatedChild struct {
	cmd    *exec.Cmd
	stderr *brokertest.Buffer
}

// startGatedChild runs the test binary's test name with env added, and
// returns once it has written the line gate on stdout (it then waits to
// be killed); it fails the test if the child ends or stays silent for a
// minute first.
func startGatedChild(t *testing.T, name, gate string, env ...string) *gatedChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	c := &gatedChild{cmd: cmd, stderr: &brokertest.Buffer{}}
	cmd.Stderr = c.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	at := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		at <- line == gate+"\n"
	}()
	select {
	case ok := <-at:
		if !ok {
			t.Fatalf("%s ended before %q:\n%s", name, gate, c.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%s never said %q:\n%s", name, gate, c.stderr.String())
	}
	return c
}

// kill SIGKILLs the child at its gate and waits for its end.
func (c *gatedChild) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the child: %v, want killed", err)
	}
}
