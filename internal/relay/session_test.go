package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"eaimq/internal/brokertest"
	"eaimq/internal/claim"
	"eaimq/internal/fail"
	"eaimq/internal/retry"
	"eaimq/internal/topo"
)

// holdFirstAnswer makes the first partner answer of the run wait, in its
// worker, between the call and its record: held is closed when it waits,
// and it goes on once release is closed. The answers after it pass.
func holdFirstAnswer(hook *func(claim.Outcome)) (held, release chan struct{}) {
	held, release = make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	*hook = func(claim.Outcome) {
		if once.CompareAndSwap(false, true) {
			close(held)
			<-release
		}
	}
	return held, release
}

func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not within 30s", what)
	}
}

// closeConnections has the broker close every connection of the vhost,
// as an operator or a node restart would.
func closeConnections(t *testing.T, w *world) {
	t.Helper()
	if _, err := w.vh.Ctl.Run(context.Background(), "-q", "close_all_connections", "-p", w.vh.Name, "test: the broker closes the connection"); err != nil {
		t.Fatal(err)
	}
}

// TestOldDeliverySettlesOnItsSession: a worker still holding a delivery
// of a session that died settles it on that session, never on the next
// one. A BUSY claim's first answer (a 503, with a delay queue) is held in
// its worker until the broker has closed the connection and the relay has
// opened a new session; the broker has given the delivery back by then,
// and the new session has it again, waiting for the claim behind the held
// worker. Released, the old worker sends no delayed copy (its session's
// sender is closed, and its ack could not follow); the new session's
// copy calls, sends the copy and acks its original. Through the new
// session's sender instead, the old worker would send the copy whose ack
// then fails, and the new session would ack its delivery as superseded.
func TestOldDeliverySettlesOnItsSession(t *testing.T) {
	w := newWorld(t)
	cfg := w.config()
	w.withDelays(&cfg, topo.Classic, time.Minute) // the copy waits there until the test is over
	held, release := holdFirstAnswer(&cfg.Hooks.AfterAnswer)
	w.vh.PublishClaims(t, brokertest.Claim("own-1", "BUSY-own", "r.pdf"))
	r := w.start(cfg)

	waitClosed(t, held, "the first answer held")
	closeConnections(t, w)
	// The gate: the fault has really happened once the new session is up
	// (its sender and route made, the old session's sender closed).
	brokertest.Eventually(t, 30*time.Second, "a new session", func() bool { return strings.Contains(r.log.String(), "msg=reconnected") })
	close(release)

	delayQueue := retry.QueueName(time.Minute)
	brokertest.Eventually(t, 30*time.Second, "the copy in its delay queue, claim.in drained", func() bool {
		return w.drained() && w.vh.Depth(t, delayQueue) == 1
	})
	r.wait(t)
	s := r.summary(t)
	if s.Delayed != 1 || s.Superseded != 0 {
		t.Errorf("summary %+v: want the one copy sent and its original acked by the new session (delayed 1, superseded 0)\n%s", s, r.log.String())
	}
	if !strings.Contains(r.log.String(), "claim NOT delayed") || !strings.Contains(r.log.String(), "the session ended") {
		t.Errorf("the old session's worker did not leave its delivery to the broker:\n%s", r.log.String())
	}
	if n := w.calls("own-1"); n != 2 {
		t.Errorf("called %d times, want 2 (the old session's call, and the new one's)", n)
	}
	if n := w.vh.Depth(t, delayQueue); n != 1 {
		t.Errorf("%s holds %d copies, want 1", delayQueue, n)
	}
	w.assertQueues(0, 0, 0)
}

// TestFatalStopDuringBackoff: a worker of a session that died stops the
// run (here its store lost its schema, a failure waiting cannot fix) while
// the relay redials a broker that refuses it. The run ends at once with
// the store's failure, not when the broker is back or --max-seconds is up.
func TestFatalStopDuringBackoff(t *testing.T) {
	w := newWorld(t)
	cfg := w.config()
	cfg.MaxRun = time.Minute
	held, release := holdFirstAnswer(&cfg.Hooks.AfterAnswer)
	w.vh.PublishClaims(t, brokertest.Claim("fatal-1", "C-fatal", "r.pdf"))
	r := w.start(cfg)

	waitClosed(t, held, "the first answer held")
	// The broker away for this run: its user may no longer open the vhost,
	// and the connection it has is closed.
	u, err := url.Parse(w.vh.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.vh.Ctl.Run(context.Background(), "-q", "clear_permissions", "-p", w.vh.Name, u.User.Username()); err != nil {
		t.Fatal(err)
	}
	closeConnections(t, w)
	brokertest.Eventually(t, 30*time.Second, "the relay redialling in vain", func() bool {
		return strings.Contains(r.log.String(), "msg=\"reconnect failed\"")
	})
	// The store's failure, made before the held answer's record.
	db, err := sql.Open("sqlite3", w.db)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("DROP TABLE attempts; DROP TABLE claims"); err != nil {
		t.Fatal(err)
	}
	close(release)
	start := time.Now()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the run did not end within 10s of the store's failure, while redialling:\n%s", r.log.String())
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the run ended %s after the store's failure: it waited out a backoff", took)
	}
	if fail.Of(r.err) != fail.IO || !strings.Contains(r.err.Error(), "dedup store") {
		t.Errorf("the run ended with %v (class %v), want the store's failure", r.err, fail.Of(r.err))
	}
	if errors.Is(r.err, context.Canceled) {
		t.Errorf("the run ended as cancelled: %v", r.err)
	}
}

// TestFatalStopWhilePaused: a stop drains, waiting for the workers; one
// of them waits for the claim system to answer (--pause-when-down), which
// it does not. The run still ends at once with the stop's cause (the
// store lost its schema), not at --max-seconds: every worker's wait
// watches the fatal stop too.
func TestFatalStopWhilePaused(t *testing.T) {
	w := newWorld(t)
	cfg := w.config()
	cfg.Claims = "http://127.0.0.1:1/v1/claims" // refused: no answer, ever
	cfg.PauseWhenDown, cfg.PauseAfter = true, 1
	cfg.Prefetch = 2
	cfg.MaxRun = time.Minute
	held, release := holdFirstAnswer(&cfg.Hooks.AfterAnswer)
	w.vh.PublishClaims(t, brokertest.Claim("paused-1", "C-p1", "r.pdf"))
	r := w.start(cfg)

	// The first call got no answer: the relay pauses (before the hook).
	waitClosed(t, held, "the first answer held")
	brokertest.Eventually(t, 30*time.Second, "the pause", func() bool { return strings.Contains(r.log.String(), "claim system down: pausing") })
	// Published now, the second claim reaches the other worker while the
	// pause is on: it waits there, before its call.
	w.vh.PublishClaims(t, brokertest.Claim("paused-2", "C-p2", "r.pdf"))
	brokertest.Eventually(t, 30*time.Second, "both claims with the workers", func() bool {
		return w.vh.Queues(t)[topo.Queue].Unacked == 2
	})
	db, err := sql.Open("sqlite3", w.db)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("DROP TABLE attempts; DROP TABLE claims"); err != nil {
		t.Fatal(err)
	}
	close(release) // the first answer's record fails: a fatal stop
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the run did not end within 10s of the store's failure, a worker paused:\n%s", r.log.String())
	}
	if fail.Of(r.err) != fail.IO || !strings.Contains(r.err.Error(), "dedup store") {
		t.Errorf("the run ended with %v (class %v), want the store's failure", r.err, fail.Of(r.err))
	}
	brokertest.Eventually(t, 10*time.Second, "both claims back in claim.in", func() bool {
		q := w.vh.Queues(t)[topo.Queue]
		return q.Messages == 2 && q.Unacked == 0
	})
}
