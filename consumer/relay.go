package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// relay moves claims from claim.in to the partner.
//
// Design: one AMQP channel per session, basic.qos(P) on it, and a fixed pool
// of P workers fed one delivery at a time. The broker never lets more than P
// deliveries be unacked, so at most P claims are at the partner at once, and
// each worker acks its own delivery (amqp091-go channels are safe for
// concurrent Ack/Nack/Reject). Workers outlive sessions: after a reconnect,
// a worker still finishing a delivery of the dead channel records its
// outcome, and its ack fails harmlessly; the redelivered copy is caught by
// the record.
type relay struct {
	url      string
	prefetch int
	lease    time.Duration
	log      *slog.Logger
	store    *store.Store
	partner  *partner
	stats    *stats
	hard     context.Context // ends only on a second signal: abandon everything
	fatal    chan error      // a store failure: stop consuming
	flight   inFlight
	tag      string
	sessions int
}

// job is one delivery handed to a worker; done tells the session it is over.
type job struct {
	d    amqp.Delivery
	done func()
}

// errStop ends the session loop because the run is over.
var errStop = errors.New("stop")

// run consumes until soft ends, then drains. It returns nil after a normal
// end, or the error that ended the run early.
func (r *relay) run(soft context.Context) error {
	work := make(chan job)
	var workers sync.WaitGroup
	for range r.prefetch {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for j := range work {
				r.handle(soft, j.d)
				j.done()
			}
		}()
	}
	defer func() {
		close(work)
		waitOrHard(r.hard, &workers)
	}()

	backoff := 100 * time.Millisecond
	first := true
	for {
		conn, ch, deliveries, err := r.connect(first)
		if err != nil {
			if first {
				return err
			}
			r.log.Warn("reconnect failed", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-soft.Done():
				return cli.Exitf(cli.ExitUnavailable, "the broker was unreachable when the run ended: %v", err)
			case <-r.hard.Done():
				return r.hard.Err()
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		first, backoff = false, 100*time.Millisecond
		err = r.session(soft, conn, ch, deliveries, work)
		broker.Close(conn)
		if errors.Is(err, errStop) {
			return nil
		}
		var fatal *cli.Error
		if errors.As(err, &fatal) {
			return err
		}
		r.log.Warn("connection lost; reconnecting", "err", err)
	}
}

// connect opens a connection and a channel, sets qos before consuming (so
// the broker never sends more than P), and starts the consumer with manual
// ack. claim.in must exist: consuming a missing queue would close the
// channel with a raw 404.
func (r *relay) connect(first bool) (*amqp.Connection, *amqp.Channel, <-chan amqp.Delivery, error) {
	conn, err := broker.Dial(r.url, "consumer", 10*time.Second)
	if err != nil {
		return nil, nil, nil, cli.Exit(cli.ExitUnavailable, err)
	}
	fail := func(code int, err error) (*amqp.Connection, *amqp.Channel, <-chan amqp.Delivery, error) {
		broker.Close(conn)
		return nil, nil, nil, cli.Exit(code, err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = topo.RequireQueue(ch, topo.Queue)
	}
	if err != nil {
		broker.Close(conn)
		return nil, nil, nil, cli.Broker(err, topo.ErrMissing)
	}
	if err := r.checkDeadLettering(conn); err != nil {
		broker.Close(conn)
		return nil, nil, nil, err
	}
	if err := ch.Qos(r.prefetch, 0, false /* per consumer */); err != nil {
		return fail(cli.ExitUnavailable, fmt.Errorf("basic.qos: %w", err))
	}
	deliveries, err := ch.Consume(topo.Queue, r.tag, false /* autoAck: never */, false, false, false, nil)
	if err != nil {
		return fail(cli.ExitUnavailable, fmt.Errorf("consume %s: %w", topo.Queue, err))
	}
	r.sessions++
	if first {
		r.log.Info("consuming", "queue", topo.Queue, "prefetch", r.prefetch, "broker", broker.Redact(r.url), "partner", r.partner.url, "store", r.store.Path())
	} else {
		r.log.Info("reconnected", "session", r.sessions)
	}
	return conn, ch, deliveries, nil
}

// checkDeadLettering makes sure a reject(requeue=false) dead-letters a
// claim rather than drops it: claim.in must carry the contract's
// x-dead-letter-* arguments (redeclaring it with them is a no-op when they
// match, a 406 when they differ) and eai.dlx must exist (dead-lettering to a
// missing exchange silently drops the message). It probes on a channel of
// its own, since a 406 or 404 closes the channel. A user without configure
// permission cannot redeclare; then the arguments go unchecked, with a
// warning, rather than the consumer refusing to run.
func (r *relay) checkDeadLettering(conn *amqp.Connection) error {
	ch, err := conn.Channel()
	if err != nil {
		return cli.Exit(cli.ExitUnavailable, fmt.Errorf("open channel: %w", err))
	}
	for _, q := range topo.Queues {
		if q.Name != topo.Queue {
			continue
		}
		if err := topo.DeclareQueue(ch, q); err != nil {
			if broker.Code(err) == amqp.AccessRefused {
				r.log.Warn("cannot verify claim.in's dead-letter arguments (no configure permission); assuming topology declared them")
				if ch, err = conn.Channel(); err != nil {
					return cli.Exit(cli.ExitUnavailable, fmt.Errorf("open channel: %w", err))
				}
				continue
			}
			if broker.Code(err) == amqp.PreconditionFailed {
				return cli.Exitf(cli.ExitConfig, "%s differs from the contract, so a rejected claim could be dropped instead of dead-lettered: %s (run topology to see the remedy)", topo.Queue, broker.Reason(err))
			}
			return cli.Exit(cli.ExitUnavailable, fmt.Errorf("check %s arguments: %w", topo.Queue, err))
		}
	}
	if err := topo.RequireExchange(ch, topo.DLX); err != nil {
		return cli.Broker(fmt.Errorf("%w (without it a rejected claim would be dropped)", err), topo.ErrMissing)
	}
	return ch.Close()
}

// session feeds deliveries to the workers until the run ends or the
// connection dies. At the end of the run it cancels the consumer first (no
// new deliveries), then waits for the deliveries in flight to be recorded
// and acked on this still-open channel, and only then lets the caller close
// the connection: closing first would turn every finished claim into a
// redelivery. Deliveries received but not started stay unacked and go back
// to the queue when the connection closes.
func (r *relay) session(soft context.Context, conn *amqp.Connection, ch *amqp.Channel, deliveries <-chan amqp.Delivery, work chan<- job) error {
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	var inflight sync.WaitGroup
	drain := func() error {
		if err := ch.Cancel(r.tag, false); err != nil {
			r.log.Warn("cancel consumer", "err", err)
		}
		waitOrHard(r.hard, &inflight)
		return errStop
	}
	lost := func(e *amqp.Error) error {
		if e == nil {
			return errors.New("connection closed")
		}
		return e
	}
	for {
		select {
		case <-soft.Done():
			return drain()
		case err := <-r.fatal:
			drain()
			return err
		case e := <-connClosed:
			return lost(e)
		case e := <-chClosed:
			return lost(e)
		case d, ok := <-deliveries:
			if !ok {
				// The broker cancelled us (claim.in deleted) or the channel
				// is closing; start over.
				return errors.New("the broker ended the consumer (was claim.in deleted?)")
			}
			if soft.Err() != nil {
				// The run ended while this delivery arrived (select picks
				// at random among ready cases): do not start a new call.
				return drain()
			}
			inflight.Add(1)
			select {
			case work <- job{d: d, done: inflight.Done}:
			case <-soft.Done():
				inflight.Done() // not started: stays unacked, goes back
				return drain()
			case e := <-connClosed:
				inflight.Done()
				return lost(e)
			}
		}
	}
}

// handle processes one delivery to its end: ack, requeue or dead-letter.
func (r *relay) handle(soft context.Context, d amqp.Delivery) {
	r.stats.received.Add(1)
	peek := peekClaim(d.Body)
	id := store.Key(d.MessageId, peek.Guid, d.Body)
	lg := claimLog{r.log, id, peek.ClaimID, d.Redelivered}
	if d.MessageId == "" && peek.Guid == "" {
		// Nothing to deduplicate on: processing it could never be made
		// exactly-once, so it goes to the DLQ with the reason on record
		// under a key made from the body.
		reason := store.ReasonNoID
		if err := r.store.Finish(r.hard, id, store.Attempt{Redelivered: d.Redelivered, Action: "dead", Error: reason}, reason); err != nil {
			r.storeFailed(lg, err)
			return
		}
		r.act(lg, d, deadLetter, reason, answer{})
		return
	}

	// Two copies of one claim in this process: the second waits for the
	// first's outcome, then finds the record.
	release, ok := r.flight.acquire(r.hard, id)
	if !ok {
		return
	}
	defer release()

	var prior int
	for {
		res, failures, err := r.store.Begin(r.hard, id, peek.ClaimID, !d.Redelivered, r.lease)
		if err != nil {
			r.storeFailed(lg, err)
			return
		}
		if res == store.Duplicate {
			// Delivered before (this copy is a redelivery, or the publisher
			// sent it twice): ack without calling the partner.
			r.act(lg, d, ack, "duplicate", answer{})
			return
		}
		if res == store.Acquired {
			prior = failures
			break
		}
		// Another consumer process is calling the partner with this id
		// right now: wait for its outcome rather than call twice.
		select {
		case <-time.After(200 * time.Millisecond):
		case <-soft.Done():
			return // stays unacked; the broker gives it back at close
		case <-r.hard.Done():
			return
		}
	}

	a := r.partner.post(r.hard, d.Body, d.ContentType, id)
	if r.hard.Err() != nil {
		return // forced exit mid-call: record nothing, ack nothing
	}
	act, reason := decide(classify(a.status), d.Redelivered, prior)
	// Record first, then ack. If we die between the two, the redelivered
	// copy is acked as a duplicate instead of calling the partner again.
	// The other way round, a crash would lose the record and call twice.
	err := r.store.Finish(r.hard, id, store.Attempt{
		At: time.Now(), Redelivered: d.Redelivered, Status: a.status, Error: a.excerpt,
		Action: act.String(), Latency: a.latency, Called: true,
	}, reason)
	if err != nil {
		r.storeFailed(lg, err)
		return
	}
	r.act(lg, d, act, reason, a)
}

// act acks, requeues or dead-letters d and logs the one line of its outcome.
func (r *relay) act(lg claimLog, d amqp.Delivery, act action, reason string, a answer) {
	var err error
	outcome := ""
	switch act {
	case ack:
		err = d.Ack(false)
		outcome = "delivered"
		if reason == "duplicate" {
			outcome = "duplicate"
		}
	case requeue:
		err = d.Nack(false, true /* requeue */)
		outcome = "requeued"
	case deadLetter:
		err = d.Reject(false /* requeue: the queue's DLX takes it */)
		outcome = "dead-lettered"
	}
	if err != nil {
		r.stats.ackErrors.Add(1)
		lg.log(slog.LevelWarn, "claim recorded but not acked: the connection is gone; the redelivered copy will meet the record",
			outcome, reason, a, "err", err)
		return
	}
	r.stats.count(outcome, a, reason)
	lg.log(slog.LevelInfo, "claim", outcome, reason, a)
}

// claimLog writes the one line per claim. It builds the line only when the
// level is enabled: at thousands of claims a second, a logger clone per
// delivery shows up in the profile.
type claimLog struct {
	l           *slog.Logger
	id, claimID string
	redelivered bool
}

func (c claimLog) log(level slog.Level, msg, outcome, reason string, a answer, extra ...any) {
	if !c.l.Enabled(context.Background(), level) {
		return
	}
	attrs := []any{"message_id", c.id, "claim_id", c.claimID, "redelivered", c.redelivered, "outcome", outcome}
	if a.status != 0 || a.err != nil {
		attrs = append(attrs, "status", a.status, "latency", a.latency.Round(time.Millisecond))
	}
	if reason != "" && reason != "duplicate" {
		attrs = append(attrs, "reason", reason)
	}
	if a.status != 201 && a.excerpt != "" {
		attrs = append(attrs, "answer", a.excerpt)
	}
	c.l.Log(context.Background(), level, msg, append(attrs, extra...)...)
}

func (c claimLog) Error(msg string, args ...any) {
	c.l.Error(msg, append([]any{"message_id", c.id, "claim_id", c.claimID}, args...)...)
}

func (r *relay) storeFailed(lg claimLog, err error) {
	r.stats.ackErrors.Add(1)
	lg.Error("dedup store failed: leaving the claim unacked and stopping", "err", err)
	select {
	case r.fatal <- cli.Exit(cli.ExitIOErr, fmt.Errorf("dedup store %s: %w", r.store.Path(), err)):
	default:
	}
}

type claimPeek struct {
	Guid    string `json:"guid"`
	ClaimID string `json:"claimId"`
}

// peekClaim reads guid and claimId from a JSON body; anything else (not
// JSON, another producer's format) gives empty strings and is left to the
// partner to judge.
func peekClaim(body []byte) claimPeek {
	var p claimPeek
	if len(body) > 0 && len(body) <= 4<<20 {
		_ = json.Unmarshal(body, &p)
	}
	return p
}

// inFlight lets one worker at a time work on a message_id in this process.
type inFlight struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func (f *inFlight) acquire(ctx context.Context, id string) (release func(), ok bool) {
	for {
		f.mu.Lock()
		if f.m == nil {
			f.m = make(map[string]chan struct{})
		}
		wait, busy := f.m[id]
		if !busy {
			done := make(chan struct{})
			f.m[id] = done
			f.mu.Unlock()
			return func() {
				f.mu.Lock()
				delete(f.m, id)
				f.mu.Unlock()
				close(done)
			}, true
		}
		f.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// waitOrHard waits for wg unless the hard context ends first.
func waitOrHard(hard context.Context, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-hard.Done():
	}
}
