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

// job is one delivery handed to a worker; done tells the session it is over.
type job struct {
	d    amqp.Delivery
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
func (r *relay) consume(interrupted, soft context.Context) error {
	work, stop := r.workers(soft)
	defer stop()

	backoff := 100 * time.Millisecond
	first := true
	for {
		dialCtx := soft
		if first {
			dialCtx = interrupted
		}
		conn, ch, deliveries, err := r.connect(dialCtx, first)
		if err != nil {
			if first {
				return err
			}
			r.cfg.Log.Warn("reconnect failed", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-soft.Done():
				return fail.Errorf(fail.Unavailable, "the broker was unreachable when the run ended: %v", err)
			case <-r.hard.Done():
				return r.hard.Err()
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		first, backoff = false, 100*time.Millisecond
		err = r.session(soft, conn, ch, deliveries, work)
		r.connected.Store(false)
		r.delay.Load().close()
		broker.Close(conn)
		if errors.Is(err, errStop) {
			return nil
		}
		// What stop was given (a store failure, a missing route) has a
		// class and ends the run; a lost connection has none: reconnect.
		if fail.Of(err) != fail.None {
			return err
		}
		r.cfg.Log.Warn("connection lost; reconnecting", "err", err)
	}
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
				r.handle(soft, j.d)
				j.done()
			}
		}()
	}
	return jobs, func() {
		close(jobs)
		waitOrHard(r.hard, &workers)
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
func (r *relay) connect(ctx context.Context, first bool) (*amqp.Connection, *amqp.Channel, <-chan amqp.Delivery, error) {
	// ctx (the run) ends a connect or handshake at once: a SIGINT while
	// the broker is slow to answer must not wait out the timeout.
	conn, err := r.dialer.Dial(ctx, r.cfg.URL)
	if err != nil {
		return nil, nil, nil, fail.New(fail.Unavailable, err)
	}
	ch, deliveries, err := r.open(conn)
	if err != nil {
		broker.Close(conn)
		return nil, nil, nil, err
	}
	r.sessions++
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
	return conn, ch, deliveries, nil
}

// open starts consuming on conn once the topology checks pass. claim.in
// must exist: consuming a missing queue would close the channel with a
// raw 404. The dead-letter route and the delay queues are checked before
// the first claim is taken, and this session's checker and sender kept.
func (r *relay) open(conn *amqp.Connection) (*amqp.Channel, <-chan amqp.Delivery, error) {
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
	r.route.Store(newDeadRoute(conn, canBind))
	if err := r.checkRetryQueues(conn); err != nil {
		return nil, nil, err
	}
	copies := r.dialer // named apart in rabbitmqctl list_connections
	copies.Program += "-delays"
	r.delay.Store(newDelayer(func(ctx context.Context) (*amqp.Connection, error) {
		return copies.Dial(ctx, r.cfg.URL)
	}, r.cfg.Log))
	if err := ch.Qos(r.cfg.Prefetch, 0, false /* per consumer */); err != nil {
		return nil, nil, fail.Errorf(fail.Unavailable, "basic.qos: %w", err)
	}
	deliveries, err := ch.Consume(topo.Queue, r.tag, false /* autoAck: never */, false, false, false, nil)
	if err != nil {
		return nil, nil, fail.Errorf(fail.Unavailable, "consume %s: %w", topo.Queue, err)
	}
	return ch, deliveries, nil
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
	watch := r.watchSession(conn) // the queues' depth (metrics)
	defer watch.end()
	acks := newAcker(ch) // settles this session's deliveries (and counts them, for the metrics)
	r.acks.Store(acks)
	defer r.acks.CompareAndSwap(acks, nil)
	var inflight sync.WaitGroup
	drain := func() error {
		if err := ch.Cancel(r.tag, false); err != nil {
			r.cfg.Log.Warn("cancel consumer", "err", err)
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
	var reopened <-chan struct{} // while held back (the store down): closed when it answers
	for {
		storeDown := r.storeDown.whenShut()
		if deliveries == nil {
			storeDown = nil // held back already
		}
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
		case <-storeDown:
			if err := r.holdBack(ch, deliveries); err != nil {
				return err
			}
			deliveries, reopened = nil, r.storeDown.whenOpen()
		case <-reopened:
			var err error
			if deliveries, err = ch.Consume(topo.Queue, r.tag, false /* autoAck: never */, false, false, false, nil); err != nil {
				return fmt.Errorf("consume %s again: %w", topo.Queue, err) // a session to start over
			}
			reopened = nil
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
