package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/fail"
	"eaimq/internal/redact"
	"eaimq/internal/topo"
)

// session is one connection's consuming, and what each delivery of it is
// settled through to the end. A job carries its session, so that a worker
// still finishing a delivery after a reconnect acks, rejects and sends its
// delayed copy on the session the delivery came on, never on the next
// one: that session's channel is closed, the broker has given the
// delivery back already, and its redelivered copy, on the new session,
// meets the record. Through the new session instead, a copy could be sent
// for a delivery that session never held, and a reject checked against a
// route on another connection (another node, with several brokers).
type session struct {
	n     int        // 1 for the first; each reconnect adds one
	acks  *acker     // its channel, as each delivery's Acknowledger
	route *deadRoute // the dead-letter route, checked on its connection
	delay *delayer   // the sender of its delayed copies
}

// over reports whether the session's channel is closed, by either end or
// with its connection: the broker has then taken back every delivery of
// it that was not settled, and requeued each for another consumer.
func (s *session) over() bool { return s.acks.ch.IsClosed() }

// job is one delivery handed to a worker, with the session it came on;
// done tells that session it is over.
type job struct {
	d    amqp.Delivery
	s    *session
	done func()
}

// errStop ends the session loop because the run is over.
var errStop = errors.New("stop")

// consume runs the workers and one session after another until soft
// ends, then drains. It returns nil after a normal end, or the error that
// ended the run early.
//
// interrupted ends on the first signal only. The first dial waits on it
// rather than on the run's deadline, so that a short --max-seconds still
// learns why the broker said no (a wrong password is answered after a
// pause), bounded by the dialer's timeout.
//
// Every wait here watches every stop: soft (the end of the run), hard
// (the second signal) and fatal (stop: a store failure, a route gone, the
// store given up on, which closes abandon first). A worker of a session
// that died can stop the run while this loop redials a broker that is
// away: the run then ends at once, not when the broker is back.
func (r *relay) consume(interrupted, soft context.Context) error {
	// The workers' end of the run is soft, or a stop that ends it early: a
	// worker waiting for the claim system to answer (--pause-when-down),
	// for another consumer's call or for a blocked broker must not hold
	// the drain after a fatal stop until --max-seconds.
	running, endRunning := r.untilStop(soft)
	defer endRunning()
	work, stopWorkers := r.workers(running)
	defer stopWorkers()

	backoff := 100 * time.Millisecond
	first := true
	for {
		dialCtx := soft
		if first {
			dialCtx = interrupted
		}
		dialCtx, endDial := r.untilStop(dialCtx)
		conn, s, deliveries, err := r.connect(dialCtx, first)
		endDial()
		if err != nil {
			if stopped := r.stopped(); stopped != nil {
				return stopped
			}
			if first {
				return err
			}
			r.cfg.Log.Warn("reconnect failed", "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-soft.Done():
				t.Stop()
				return fail.Errorf(fail.Unavailable, "the broker was unreachable when the run ended: %v", err)
			case <-r.hard.Done():
				t.Stop()
				return r.hard.Err()
			case <-r.fatal:
				t.Stop()
				return r.why
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		if first && r.cfg.Hooks.Deliveries != nil {
			deliveries = r.cfg.Hooks.Deliveries(deliveries)
		}
		first, backoff = false, 100*time.Millisecond
		err = r.session(soft, conn, s, deliveries, work)
		r.connected.Store(false)
		// Closed before the next session opens: a worker still holding a
		// delivery of this one finds its sender closed and sends no copy
		// (its delivery is back in claim.in with the connection).
		s.delay.close()
		broker.Close(conn)
		if errors.Is(err, errStop) {
			// A stop that came as the run ended still says why: the
			// session's select picks at random among the cases ready.
			select {
			case <-r.fatal:
				return r.why
			default:
			}
			return nil
		}
		// What stop was given (a store failure, a missing route) has a
		// class and ends the run; a lost connection has none: reconnect.
		if fail.Of(err) != fail.None {
			return err
		}
		if errors.Is(err, errStalled) {
			// Dialled in order again, the list would lead back to the
			// node given up on: the next address comes first, that one last.
			r.setURL(nextFirst(r.dialURL(), conn.RemoteAddr()))
			r.cfg.Log.Warn("session stalled; connecting to the next address", "err", err, "node", conn.RemoteAddr().String(), "stall_after", r.cfg.StallAfter)
			continue
		}
		r.cfg.Log.Warn("connection lost; reconnecting", "err", err)
	}
}

// untilStop is ctx, ended early by the hard stop or a fatal one, so that
// a dial or handshake to a slow broker does not outlive the run's end.
func (r *relay) untilStop(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-r.hard.Done():
		case <-r.fatal:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, cancel
}

// stopped is why the run ends early (the hard stop's error, or what stop
// was given), nil while it goes on.
func (r *relay) stopped() error {
	select {
	case <-r.fatal:
		return r.why
	default:
	}
	return r.hard.Err()
}

// workers starts the fixed pool of P workers, fed one delivery at a time.
// stop closes the pool and waits for the workers to finish their claims.
func (r *relay) workers(soft context.Context) (work chan<- job, stop func()) {
	jobs := make(chan job)
	var workers sync.WaitGroup
	for range r.cfg.Prefetch {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for j := range jobs {
				r.handle(soft, j.s, j.d)
				j.done()
			}
		}()
	}
	return jobs, func() {
		close(jobs)
		waitUnlessForced(r.hard, &workers)
		if r.hard.Err() != nil {
			// Forced out: the calls in flight are abandoned, but an answer
			// already in hand is recorded first (bounded: the store's
			// commit is milliseconds, a broken disk must not hang the exit).
			waitAtMost(&r.answered, 3*time.Second)
		}
	}
}

// connect opens a connection and a channel, checks the topology the
// session relies on, sets qos before consuming (so the broker never sends
// more than P), and starts the consumer with manual ack.
func (r *relay) connect(ctx context.Context, first bool) (*amqp.Connection, *session, <-chan amqp.Delivery, error) {
	// ctx (the run) ends a connect or handshake at once: a SIGINT while
	// the broker is slow to answer must not wait out the timeout.
	conn, err := r.dialer.Dial(ctx, r.dialURL())
	if err != nil {
		return nil, nil, nil, fail.New(fail.Unavailable, err)
	}
	// The dial bounds the handshake; the session's opening (a channel,
	// the topology's checks, qos, consume) is a dozen round trips the
	// library does not bound, and a node that took the connection and then
	// stalls (paused, or cut off mid-partition while its heartbeats go on)
	// would hold the consumer on it for good, reconnecting nowhere. Past
	// the dial's timeout the socket is closed under them, which fails the
	// pending call, and the next attempt goes to the next address.
	stall := time.AfterFunc(r.dialer.Timeout, func() { broker.Abort(conn, 0) })
	s, deliveries, err := r.open(conn)
	if !stall.Stop() {
		if err == nil {
			s.delay.close()
		}
		broker.Close(conn)
		r.setURL(nextFirst(r.dialURL(), conn.RemoteAddr()))
		return nil, nil, nil, fail.Errorf(fail.Unavailable, "the broker took the connection but did not open the session within %s: a node paused or cut off from its cluster does this", r.dialer.Timeout)
	}
	if err != nil {
		broker.Close(conn)
		return nil, nil, nil, err
	}
	r.sessions++
	s.n = r.sessions
	r.connected.Store(true)
	if first {
		// The first line says which broker, vhost and user apply, defaults
		// included: an empty EAI_AMQP_URL or amqp://host means vhost "/"
		// as guest, and that should not be a surprise.
		vhost, _ := broker.VHost(r.cfg.URL)
		attrs := []any{"queue", topo.Queue, "prefetch", r.cfg.Prefetch, "broker", redact.URL(r.cfg.URL), "node", conn.RemoteAddr().String(), "vhost", vhost,
			"partner", redact.URL(r.partner.URL()), "accept", r.cfg.Accept.String(), "store", r.store.Path()}
		if r.cfg.Retry != nil {
			attrs = append(attrs, "retry_delays", r.cfg.Retry.String())
		}
		r.cfg.Log.Info("consuming", attrs...)
	} else {
		// With several brokers in EAI_AMQP_URL, this may be another node:
		// the dial takes the first that answers.
		r.cfg.Log.Info("reconnected", "session", r.sessions, "node", conn.RemoteAddr().String())
		r.metrics.Reconnected()
	}
	return conn, s, deliveries, nil
}

// open starts consuming on conn once the topology checks pass. claim.in
// must exist: consuming a missing queue would close the channel with a
// raw 404. The dead-letter route and the delay queues are checked before
// the first claim is taken, and kept as this session's checker; the
// session gets a sender of delayed copies of its own.
func (r *relay) open(conn *amqp.Connection) (*session, <-chan amqp.Delivery, error) {
	ch, err := conn.Channel()
	if err == nil {
		err = topo.RequireQueue(ch, topo.Queue)
	}
	if err != nil {
		return nil, nil, fail.Broker(err, topo.ErrMissing)
	}
	canBind, err := r.checkDeadLettering(conn)
	if err != nil {
		return nil, nil, err
	}
	if err := r.checkRetryQueues(conn); err != nil {
		return nil, nil, err
	}
	copies := r.dialer // named apart in rabbitmqctl list_connections
	copies.Program += "-delays"
	s := &session{
		acks:  newAcker(ch, r.cfg.Hooks.NoAckBatch),
		route: newDeadRoute(conn, canBind),
		delay: newDelayer(func(ctx context.Context) (*amqp.Connection, error) {
			return copies.Dial(ctx, r.dialURL())
		}, r.cfg.Log),
	}
	if err := ch.Qos(r.cfg.Prefetch, 0, false /* per consumer */); err != nil {
		return nil, nil, fail.Errorf(fail.Unavailable, "basic.qos: %w", err)
	}
	deliveries, err := ch.Consume(topo.Queue, r.tag, false /* autoAck: never */, false, false, false, nil)
	if err != nil {
		return nil, nil, fail.Errorf(fail.Unavailable, "consume %s: %w", topo.Queue, err)
	}
	return s, deliveries, nil
}

// session feeds deliveries to the workers until the run ends or the
// connection dies. At the end of the run it cancels the consumer first (no
// new deliveries), then waits for the deliveries in flight to be recorded
// and acked on this still-open channel, and only then lets the caller close
// the connection: closing first would turn every finished claim into a
// redelivery. Deliveries received but not started stay unacked and go back
// to the queue when the connection closes.
func (r *relay) session(soft context.Context, conn *amqp.Connection, s *session, deliveries <-chan amqp.Delivery, work chan<- job) error {
	ch, acks := s.acks.ch, s.acks // acks settles this session's deliveries (and counts them, for the metrics)
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	watch := r.watchSession(conn) // the queues' depth (metrics)
	defer watch.end()
	stall := r.watchStall(conn, acks) // --stall-after (nil: off)
	defer stall.end()
	r.acks.Store(acks)
	defer r.acks.CompareAndSwap(acks, nil)
	var inflight sync.WaitGroup
	drain := func() error {
		if err := ch.Cancel(r.tag, false); err != nil {
			r.cfg.Log.Warn("cancel consumer", "err", err)
		}
		waitUnlessForced(r.hard, &inflight)
		return errStop
	}
	lost := func(e *amqp.Error) error {
		if e == nil {
			return errors.New("connection closed")
		}
		return e
	}
	var reopened <-chan struct{} // while held back (the store down): closed when it answers
	for {
		storeDown := r.storeDown.whenShut()
		if deliveries == nil {
			storeDown = nil // held back already
		}
		select {
		case <-soft.Done():
			return drain()
		case <-r.fatal:
			drain()
			return r.why
		case <-r.hard.Done():
			return drain() // abandons at once: the calls in flight go back
		case e := <-connClosed:
			return lost(e)
		case e := <-chClosed:
			return lost(e)
		case <-stall.fired():
			// Its deliveries are unacked at the broker: closing the
			// connection (the caller) gives them back at once. The workers
			// still holding one finish it; their ack is refused, and the
			// copy redelivered elsewhere meets the record.
			return stall.why
		case <-storeDown:
			if err := r.holdBack(ch, deliveries); err != nil {
				return err
			}
			stall.hold(true)
			deliveries, reopened = nil, r.storeDown.whenOpen()
		case <-reopened:
			var err error
			if deliveries, err = ch.Consume(topo.Queue, r.tag, false /* autoAck: never */, false, false, false, nil); err != nil {
				return fmt.Errorf("consume %s again: %w", topo.Queue, err) // a session to start over
			}
			reopened = nil
			stall.hold(false)
			r.cfg.Log.Info("the dedup store answers: consuming again")
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
			acks.took(&d)
			stall.delivered()
			inflight.Add(1)
			// Every worker may be busy for as long as a call takes: the
			// hand-off watches every stop, as the loop does.
			select {
			case work <- job{d: d, s: s, done: inflight.Done}:
			case <-soft.Done():
				inflight.Done() // not started: stays unacked, goes back
				return drain()
			case <-r.hard.Done():
				inflight.Done()
				return drain()
			case <-r.fatal:
				inflight.Done()
				drain()
				return r.why
			case e := <-connClosed:
				inflight.Done()
				return lost(e)
			case e := <-chClosed:
				inflight.Done()
				return lost(e)
			}
		}
	}
}

// holdBack stops consuming while the dedup store is unavailable: the
// consumer is cancelled, so the broker sends nothing more, and what it had
// sent already and no worker has taken goes back to claim.in at once,
// where another consumer (or this one, later) takes it. The session
// consumes again when the store answers.
func (r *relay) holdBack(ch *amqp.Channel, deliveries <-chan amqp.Delivery) error {
	if err := ch.Cancel(r.tag, false); err != nil {
		return fmt.Errorf("cancel the consumer while the dedup store is unavailable: %w", err)
	}
	// After basic.cancel-ok the library hands over what it had buffered,
	// then closes the channel.
	for d := range deliveries {
		d.Nack(false, true /* requeue: give it back */)
	}
	return nil
}
