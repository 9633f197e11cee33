package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/claim"
	"eaimq/internal/claimid"
	"eaimq/internal/cli"
	"eaimq/internal/metrics"
	"eaimq/internal/redact"
	"eaimq/internal/retry"
	"eaimq/internal/store"
	"eaimq/internal/topo"
	"eaimq/internal/trace"
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
	url    string
	dialer broker.Dialer
	// interrupted ends on the first signal only. The first dial waits on
	// it rather than on the run's deadline, so that a short --max-seconds
	// still learns why the broker said no (a wrong password is answered
	// after a pause), bounded by the dialer's timeout.
	interrupted context.Context
	prefetch    int
	lease       time.Duration
	accept      acceptSet
	log         *slog.Logger
	store       store.Store
	partner     *partner
	stats       *stats
	hard        context.Context // ends only on a second signal: abandon everything
	fatal       chan error      // a store failure or a missing dead-letter route: stop consuming
	flight      inFlight
	tag         string
	sessions    int
	route       atomic.Pointer[deadRoute] // the current session's dead-letter check
	// plan is --retry-delays (nil: the lab's requeue-once rule); delay is
	// the current session's sender of delayed copies.
	plan  *retry.Plan
	delay atomic.Pointer[delayer]
	pause *pauser // --pause-when-down (nil: never pauses)
	// metrics is --metrics-addr (nil: none); connected and storeBroken
	// feed /readyz.
	metrics     *metrics.Consumer
	connected   atomic.Bool
	storeBroken atomic.Bool
	// answered counts workers holding a partner answer that is not yet on
	// record. A forced exit (second signal) waits a moment for them: a 201
	// received and then thrown away is a claim the partner has and the
	// record does not, so its next copy would be sent again.
	answered sync.WaitGroup
}

// afterAnswer, when set (tests only), runs after a partner call returned
// and before its outcome is recorded.
var afterAnswer func(claim.Outcome)

// beforeAct, when set (tests only), runs after an outcome is recorded and
// before the delivery is acked, requeued or rejected.
var beforeAct func(amqp.Delivery, claim.Outcome)

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
		if r.hard.Err() != nil {
			// Forced out: the calls in flight are abandoned, but an answer
			// already in hand is recorded first (bounded: the store's
			// commit is milliseconds, a broken disk must not hang the exit).
			waitAtMost(&r.answered, 3*time.Second)
		}
	}()

	backoff := 100 * time.Millisecond
	first := true
	for {
		dialCtx := soft
		if first {
			dialCtx = r.interrupted
		}
		conn, ch, deliveries, err := r.connect(dialCtx, first)
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
		r.connected.Store(false)
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
func (r *relay) connect(ctx context.Context, first bool) (*amqp.Connection, *amqp.Channel, <-chan amqp.Delivery, error) {
	// ctx (the run) ends a connect or handshake at once: a SIGINT while
	// the broker is slow to answer must not wait out the timeout.
	conn, err := r.dialer.Dial(ctx, r.url)
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
	canBind, err := r.checkDeadLettering(conn)
	if err != nil {
		broker.Close(conn)
		return nil, nil, nil, err
	}
	r.route.Store(newDeadRoute(conn, canBind))
	if err := r.checkRetryQueues(conn); err != nil {
		broker.Close(conn)
		return nil, nil, nil, err
	}
	r.delay.Store(newDelayer(conn))
	if err := ch.Qos(r.prefetch, 0, false /* per consumer */); err != nil {
		return fail(cli.ExitUnavailable, fmt.Errorf("basic.qos: %w", err))
	}
	deliveries, err := ch.Consume(topo.Queue, r.tag, false /* autoAck: never */, false, false, false, nil)
	if err != nil {
		return fail(cli.ExitUnavailable, fmt.Errorf("consume %s: %w", topo.Queue, err))
	}
	r.sessions++
	r.connected.Store(true)
	if first {
		// The first line says which broker, vhost and user apply, defaults
		// included: an empty EAI_AMQP_URL or amqp://host means vhost "/"
		// as guest, and that should not be a surprise.
		vhost, _ := broker.VHost(r.url)
		attrs := []any{"queue", topo.Queue, "prefetch", r.prefetch, "broker", redact.URL(r.url), "node", conn.RemoteAddr().String(), "vhost", vhost,
			"partner", redact.URL(r.partner.url), "accept", r.accept.String(), "store", r.store.Path()}
		if r.plan != nil {
			attrs = append(attrs, "retry_delays", r.plan.String())
		}
		r.log.Info("consuming", attrs...)
	} else {
		// With several brokers in EAI_AMQP_URL, this may be another node:
		// the dial takes the first that answers.
		r.log.Info("reconnected", "session", r.sessions, "node", conn.RemoteAddr().String())
	}
	return conn, ch, deliveries, nil
}

// checkDeadLettering makes sure a reject(requeue=false) dead-letters a
// claim rather than drops it: claim.in must carry the contract's
// x-dead-letter-* arguments (redeclaring it with them is a no-op when they
// match, a 406 when they differ), and eai.dlx, claim.dead and their binding
// must exist (dead-lettering into a missing route silently drops the
// message). It probes on a channel of its own, since a 406 or 404 closes the
// channel. A user without configure permission cannot redeclare; then the
// arguments go unchecked, with a warning, rather than the consumer refusing
// to run. It reports whether this user may bind (see deadRoute).
func (r *relay) checkDeadLettering(conn *amqp.Connection) (canBind bool, err error) {
	ch, err := conn.Channel()
	if err != nil {
		return false, cli.Exit(cli.ExitUnavailable, fmt.Errorf("open channel: %w", err))
	}
	// claim.in may be classic (the lab's) or quorum (topology -queue-type
	// quorum): check it against the arguments of the type it is.
	for _, q := range topo.QueuesIn(conn) {
		if q.Name != topo.Queue {
			continue
		}
		if err := topo.DeclareQueue(ch, q); err != nil {
			if broker.Code(err) == amqp.AccessRefused {
				r.log.Warn("cannot verify claim.in's dead-letter arguments (no configure permission); assuming topology declared them")
				if ch, err = conn.Channel(); err != nil {
					return false, cli.Exit(cli.ExitUnavailable, fmt.Errorf("open channel: %w", err))
				}
				continue
			}
			if broker.Code(err) == amqp.PreconditionFailed {
				return false, cli.Exitf(cli.ExitConfig, "%s differs from the contract, so a rejected claim could be dropped instead of dead-lettered: %s (run topology to see the remedy)", topo.Queue, broker.Reason(err))
			}
			return false, cli.Exit(cli.ExitUnavailable, fmt.Errorf("check %s arguments: %w", topo.Queue, err))
		}
	}
	ch.Close()
	// The rest of the route: the same check as before every reject.
	canBind = true
	err = newDeadRoute(conn, true).verify()
	if broker.Code(err) == amqp.AccessRefused {
		r.log.Warn("cannot verify the binding eai.dlx -> claim.dead (no permission to bind); checking that both exist")
		canBind = false
		err = newDeadRoute(conn, false).verify()
	}
	switch {
	case errors.Is(err, errRouteMissing):
		return false, routeMissing(err)
	case err != nil:
		return false, cli.Exit(cli.ExitUnavailable, err)
	}
	return canBind, nil
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
	r.metrics.Received()
	r.metrics.InFlight(1)
	defer r.metrics.InFlight(-1)
	// The dedup key: the message_id, else the body's guid taken byte-exact
	// and exact-case (claimid, the rule publish applies), else a body hash.
	guid, claimID := claimid.Peek(d.Body)
	id := claim.Key(d.MessageId, guid, d.Body)
	tp, traceID := trace.From(d.Headers)
	lg := claimLog{r.log, id, claimID, traceID, d.Redelivered}
	if d.MessageId == "" && guid == "" {
		// Nothing to deduplicate on: processing it could never be made
		// exactly-once, so it goes to the DLQ with the reason on record
		// under a key made from the body.
		r.settle(lg, d, id, claim.OutNoID, "")
		return
	}
	// A claim whose id or content type cannot be put into an HTTP request
	// as it is would fail the same way every time: a permanent failure of
	// its own, decided before any call and without burning its retry.
	if err := claimid.HeaderValue(id); err != nil {
		r.settle(lg, d, id, claim.OutUnsendable, "message_id as Idempotency-Key: "+err.Error())
		return
	}
	if err := claimid.HeaderValue(d.ContentType); err != nil {
		r.settle(lg, d, id, claim.OutUnsendable, "content_type: "+err.Error())
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
		// While the claim system is down (--pause-when-down) no call
		// starts: this delivery waits here unacked, before Begin takes
		// the claim, so that no lease runs out during a long pause.
		// The run may have ended while this copy waited: a new call now
		// would outlive --max-seconds. It stays unacked and goes back to
		// the queue when the channel closes.
		if !r.pause.wait(soft) || soft.Err() != nil {
			return
		}
		b, err := r.store.Begin(r.hard, id, claimID, !d.Redelivered, r.lease)
		if err != nil {
			r.storeFailed(lg, err)
			return
		}
		switch b.Result {
		case claim.Done:
			// Delivered before (this copy is a redelivery, or the
			// publisher sent it twice): ack without calling the partner.
			r.act(lg, d, claim.OutDuplicate, "", answer{}, later{})
			return
		case claim.DeadBefore:
			// Dead-lettered before, and the reject never reached the
			// broker: reject again, with the decision on record, without
			// a call.
			r.act(lg, d, b.Prior, "the decision on record: rejected again without a call", answer{}, later{})
			return
		case claim.Acquired:
			prior = b.Failures
		}
		if b.Result == claim.Acquired {
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

	r.answered.Add(1)
	a := r.partner.post(r.hard, d.Body, d.ContentType, id, tp)
	if a.err != nil && r.hard.Err() != nil {
		// Forced exit mid-call: the outcome is unknown, so nothing is
		// recorded and nothing acked; the copy goes back to the queue.
		r.answered.Done()
		return
	}
	r.metrics.Call(a.status, a.latency)
	r.pause.note(soft, a)
	out := decide(a.status, r.accept, d.Redelivered, prior)
	var wait later
	if r.plan != nil {
		// --retry-delays replaces the lab's requeue-once rule: the count
		// is the copy's own retries, carried in its headers.
		wait.done = retry.Done(d.Headers)
		prior = wait.done
		out, wait.delay = delayed(out, *r.plan, wait.done, a.retryAfter)
	}
	if afterAnswer != nil {
		afterAnswer(out)
	}
	// Record first, then ack. If we die between the two, the redelivered
	// copy is acked as a duplicate (or, for a dead letter, rejected again)
	// instead of calling the partner again. The other way round, a crash
	// would lose the record and call twice. The record is written even
	// after a second signal: an answer in hand is the one thing that must
	// not be thrown away.
	detail := out.Describe(a.status, prior)
	commit := time.Now()
	recorded, err := r.store.Finish(context.WithoutCancel(r.hard), id, claim.Attempt{
		At: time.Now(), Redelivered: d.Redelivered, Status: a.status, Error: a.excerpt,
		Outcome: out, Detail: detail, Latency: a.latency, Called: true,
	})
	r.metrics.Commit(time.Since(commit))
	r.answered.Done()
	if err != nil {
		r.storeFailed(lg, err)
		return
	}
	if r.hard.Err() != nil {
		return // recorded; the redelivered copy meets the record
	}
	if recorded != out {
		detail = "delivered meanwhile by another consumer"
	}
	r.act(lg, d, recorded, detail, a, wait)
}

// later is a delayed retry's plan: the delay, and the retries before it.
type later struct {
	delay time.Duration
	done  int
}

// settle records an outcome decided without calling the partner, then
// acts on it.
func (r *relay) settle(lg claimLog, d amqp.Delivery, id string, out claim.Outcome, why string) {
	detail := out.Describe(0, 0)
	if why != "" {
		detail += ": " + why
	}
	if _, err := r.store.Finish(context.WithoutCancel(r.hard), id, claim.Attempt{
		Redelivered: d.Redelivered, Outcome: out, Detail: detail, Error: excerpt([]byte(why)),
	}); err != nil {
		r.storeFailed(lg, err)
		return
	}
	r.act(lg, d, out, detail, answer{}, later{})
}

// act acks, requeues or dead-letters d as out says and logs the one line
// of its outcome.
func (r *relay) act(lg claimLog, d amqp.Delivery, out claim.Outcome, detail string, a answer, wait later) {
	if beforeAct != nil {
		beforeAct(d, out)
	}
	var err error
	var extra []any
	switch out.Action {
	case claim.Ack:
		err = d.Ack(false)
	case claim.Requeue:
		err = d.Nack(false, true /* requeue */)
	case claim.Delay:
		// The copy first, confirmed, then the ack: acked first, a crash
		// in between would lose the claim; this way it leaves two copies,
		// and the record absorbs the second.
		q := retry.QueueName(wait.delay)
		extra = []any{"retry", wait.done + 1, "queue", q, "retry_in", wait.delay}
		h := retry.NextHeaders(d.Headers, wait.done, retry.HistoryLine(time.Now(), a.status, a.excerpt, wait.delay))
		if serr := r.delay.Load().send(r.hard, d, wait.delay, h); serr != nil {
			r.stats.ackErrors.Add(1)
			if errors.Is(serr, errDelayQueueMissing) {
				lg.log(slog.LevelError, "claim NOT delayed: left in claim.in", out, detail, a, append(extra, "err", serr)...)
				r.stop(r.delayMissing(serr))
				return
			}
			// Whether the broker has the copy is unknown: requeue the
			// original rather than leave the claim to chance. If the copy
			// did arrive, one of the two meets the other's record.
			lg.log(slog.LevelWarn, "claim NOT delayed: requeued instead", out, detail, a, append(extra, "err", serr)...)
			d.Nack(false, true /* requeue */)
			return
		}
		err = d.Ack(false)
	case claim.DeadLetter:
		// The broker drops a rejected message whose dead-letter route is
		// gone, and says nothing. Check the route first; if it is gone,
		// reject nothing and stop: the claim stays in claim.in, its
		// decision on record.
		if rerr := r.route.Load().verify(); rerr != nil {
			r.stats.ackErrors.Add(1)
			lg.log(slog.LevelError, "claim NOT dead-lettered: left in claim.in", out, detail, a, "err", rerr)
			if errors.Is(rerr, errRouteMissing) {
				r.stop(routeMissing(rerr))
			}
			return
		}
		err = d.Reject(false /* requeue: the queue's DLX takes it */)
	}
	if err != nil {
		r.stats.ackErrors.Add(1)
		lg.log(slog.LevelWarn, "claim recorded but not acked: the connection is gone; the redelivered copy will meet the record",
			out, detail, a, "err", err)
		return
	}
	r.stats.count(out)
	r.metrics.Settled(out)
	level := slog.LevelInfo
	switch out.Action {
	case claim.DeadLetter:
		level = slog.LevelWarn
	case claim.Delay:
		r.metrics.RetryScheduled(retry.QueueName(wait.delay))
	}
	lg.log(level, "claim", out, detail, a, extra...)
}

// claimLog writes the one line per claim. It builds the line only when the
// level is enabled: at thousands of claims a second, a logger clone per
// delivery shows up in the profile.
type claimLog struct {
	l           *slog.Logger
	id, claimID string
	traceID     string // the message's W3C trace id, when it carries one
	redelivered bool
}

func (c claimLog) log(level slog.Level, msg string, out claim.Outcome, detail string, a answer, extra ...any) {
	if !c.l.Enabled(context.Background(), level) {
		return
	}
	// Fields from a message are clipped: a 1 MiB claimId must not make a
	// 1 MiB log line. (slog quotes and escapes what it prints.)
	attrs := []any{"message_id", clip(c.id), "claim_id", clip(c.claimID), "redelivered", c.redelivered,
		"outcome", out.Word(), "reason", out.Reason.String()}
	if c.traceID != "" {
		attrs = append(attrs, "trace_id", c.traceID)
	}
	if a.status != 0 || a.err != nil {
		attrs = append(attrs, "status", a.status, "latency", a.latency.Round(time.Millisecond))
	}
	if detail != "" && out.Reason != claim.Delivered && out.Reason != claim.Duplicate {
		attrs = append(attrs, "detail", detail)
	}
	if a.status != 201 && a.excerpt != "" {
		attrs = append(attrs, "answer", a.excerpt)
	}
	c.l.Log(context.Background(), level, msg, append(attrs, extra...)...)
}

func (c claimLog) Error(msg string, args ...any) {
	attrs := []any{"message_id", clip(c.id), "claim_id", clip(c.claimID)}
	if c.traceID != "" {
		attrs = append(attrs, "trace_id", c.traceID)
	}
	c.l.Error(msg, append(attrs, args...)...)
}

// clip shortens a field taken from a message for a log line.
func clip(s string) string {
	const max = 256
	if len(s) <= max {
		return s
	}
	return s[:max] + fmt.Sprintf("…(%d bytes)", len(s))
}

func (r *relay) storeFailed(lg claimLog, err error) {
	r.stats.ackErrors.Add(1)
	r.storeBroken.Store(true)
	lg.Error("dedup store failed: leaving the claim unacked and stopping", "err", err)
	r.stop(cli.Exit(cli.ExitIOErr, fmt.Errorf("dedup store %s: %w", r.store.Path(), err)))
}

// ready is /readyz: the broker channel is open, the store has not failed,
// and the consumer is not paused.
func (r *relay) ready() (bool, string) {
	switch {
	case !r.connected.Load():
		return false, "no broker connection (reconnecting)"
	case r.storeBroken.Load():
		return false, "the dedup store failed"
	case r.pause.paused():
		return false, "paused: the claim system is down"
	}
	return true, ""
}

// stop ends the run with err (the first one wins).
func (r *relay) stop(err error) {
	select {
	case r.fatal <- err:
	default:
	}
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

// waitAtMost waits for wg, or for d.
func waitAtMost(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
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
