// Package migrate moves claim.in and claim.dead, claims and all, to the
// other queue type (topology -migrate), without losing a claim: every
// claim is confirmed in its new queue before it leaves the old one, and a
// migration that stopped midway is finished by running it again.
package migrate

import (
	"context"
	"fmt"
	"io"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/fail"
	"eaimq/internal/topo"
)

// moveWindow is how many messages one batch of a move holds unacked in the
// old queue while their copies wait for confirms. Between batches nothing
// is in flight, so a stop there (a signal, the AfterMove hook) leaves no
// copy behind; a crash inside a batch can leave at most this many claims
// in both queues, with the same message_id, which the consumer's dedup
// record absorbs.
const moveWindow = 100

// confirmTimeout bounds the wait for one copy's confirm; a quorum queue
// confirms once a majority of its members has written the copy.
const confirmTimeout = 30 * time.Second

// Config is the migration to run.
type Config struct {
	VHost string         // the vhost conn is in, for the messages
	To    topo.QueueType // the type claim.in and claim.dead are to have

	// AfterMove, when set (tests only), runs after each batch of a move
	// is confirmed and acked, with the number moved so far by that move;
	// returning an error stops the migration there, as a crash would.
	AfterMove func(moved int) error
}

// migration is one run of Run.
type migration struct {
	Config
	conn *amqp.Connection
	out  io.Writer // progress lines
}

// migrating is the name of the temporary queue that holds queue's claims
// while queue is deleted and declared again with the other type.
func migrating(queue string) string { return queue + ".migrating" }

// Run moves claim.dead, then claim.in, on conn to queue type cfg.To,
// without losing a claim (see migrateQueue), printing its progress on
// stdout. It refuses before moving anything when a consumer is attached
// to either queue or a queue matches neither type (Config), or another
// migration holds the vhost (TempFail). Stopped midway, its error says to
// run it again: Interrupted for a signal, else Unavailable unless the
// cause has a class of its own.
func Run(ctx context.Context, conn *amqp.Connection, cfg Config, stdout io.Writer) error {
	m := &migration{Config: cfg, conn: conn, out: stdout}
	vhost, to := cfg.VHost, cfg.To
	// The exchanges must exist for the bindings the move shifts around.
	ch, err := conn.Channel()
	if err != nil {
		return fail.New(fail.Unavailable, fmt.Errorf("open channel: %w", err))
	}
	for _, s := range topo.Exchanges {
		if err := topo.DeclareExchange(ch, s); err != nil {
			return topo.Explain(conn, &topo.DeclareError{Kind: "exchange", Name: s.Name, Object: s.String(), Err: err}, vhost, to)
		}
	}
	ch.Close()

	unlock, err := lock(conn, vhost)
	if err != nil {
		return err
	}
	defer unlock()

	queues := []string{topo.DeadQueue, topo.Queue} // the contract's order
	if err := m.refuse(queues); err != nil {
		return err
	}
	total := 0
	for _, q := range queues {
		n, err := m.migrateQueue(ctx, q)
		total += n
		if err != nil {
			return fmt.Errorf("%w\n  every claim is in %s or %s; run topology -migrate %s again to finish",
				fail.New(fail.Unavailable, err), q, migrating(q), to)
		}
	}
	// Whatever else of the contract is missing (a binding after a crash
	// between two steps), as a plain declaration of type to would.
	if err := topo.DeclareFor(conn, to); err != nil {
		return topo.Explain(conn, err, vhost, to)
	}
	fmt.Fprintf(stdout, "topology: migrated claim.in and claim.dead to %s queues in vhost %q: moved %d claim(s)\n", to, vhost, total)
	return nil
}

// refuse is the error for a queue that cannot be moved: one of neither
// type, or one with a consumer attached, it or its temporary queue.
func (m *migration) refuse(queues []string) error {
	for _, q := range queues {
		st, err := topo.InspectQueue(m.conn, q)
		if err != nil {
			return fail.New(fail.Unavailable, err)
		}
		if st.Exists && st.Type == "" {
			return fail.Errorf(fail.Config, "queue %s in vhost %q matches neither the classic nor the quorum contract (%s); "+
				"run topology to see the remedy", q, m.VHost, st.Differs)
		}
		tmp, _, err := peek(m.conn, migrating(q))
		if err != nil {
			return fail.New(fail.Unavailable, err)
		}
		for name, n := range map[string]int{q: st.Consumers, migrating(q): tmp.Consumers} {
			if n > 0 {
				// A consumer would take claims from under the move, and
				// an old queue with a consumer is not deleted.
				return fail.Errorf(fail.Config, "%d consumer(s) attached to %s in vhost %q: stop the consumers first; "+
					"a consumer would race the move", n, name, m.VHost)
			}
		}
	}
	return nil
}

// lockQueue is held, as an exclusive queue, by the connection of the one
// migration running in a vhost.
const lockQueue = "claim.migrating.lock"

// lock takes the vhost's migration lock: an exclusive queue, which the
// broker deletes when its connection closes, however it closes. It keeps
// two migrations from moving the same claims, and it keeps a rerun from
// starting while the broker still holds the connection of a run that died
// (a network failure can leave it open until its heartbeat times out).
// That connection may hold up to moveWindow claims taken with basic.get
// and not yet acked; they count in no queue's depth until the broker
// returns them, so a rerun that saw the queue "empty" would delete them
// with it. A basic.get leaves no consumer to see; the lock is what shows.
func lock(conn *amqp.Connection, vhost string) (unlock func(), err error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fail.New(fail.Unavailable, fmt.Errorf("open channel: %w", err))
	}
	_, err = ch.QueueDeclare(lockQueue, false /* durable */, true /* autoDelete */, true /* exclusive */, false /* noWait */, nil)
	if broker.Code(err) == amqp.ResourceLocked {
		return nil, fail.Errorf(fail.TempFail, "another topology -migrate is running in vhost %q (it holds %s), or one that stopped "+
			"still has its connection open at the broker; run again when it has finished or its connection is gone", vhost, lockQueue)
	}
	if err != nil {
		return nil, fail.New(fail.Unavailable, fmt.Errorf("declare %s: %w", lockQueue, err))
	}
	return func() {
		// Deleted now rather than when the connection closes, so that
		// the vhost holds only the contract's queues once topology exits.
		ch.QueueDelete(lockQueue, false, false, false)
		ch.Close()
	}, nil
}

// migrateQueue moves queue (with its binding) to type m.To and returns how
// many claims the new queue received from the old one.
//
// The claims go through a temporary queue, because the broker cannot change
// a queue's type and a name is held by one queue at a time:
//
//  1. declare queue.migrating as type to, bind it as queue is bound, then
//     unbind queue: new claims now land in the temporary queue;
//  2. move every claim from queue to it, then delete queue only if it is
//     empty and unused;
//  3. declare queue as type to, bind it, unbind the temporary queue, move
//     everything back, and delete the temporary queue only if it is empty.
//
// Every step is idempotent and the steps to take are read from what
// exists, so a run that stopped anywhere is finished by running it again.
// While both queues are bound, a claim published at that instant is routed
// to both, and arrives twice with one message_id: the consumer's dedup
// record absorbs it. Binding first and unbinding second is the order that
// never leaves the key without a queue (a publisher's claim would be
// returned).
func (m *migration) migrateQueue(ctx context.Context, queue string) (int, error) {
	to := m.To
	spec := topo.SpecFor(to, queue)
	tmp := topo.QueueSpec{Name: migrating(queue), Args: spec.Args}
	var bind topo.BindingSpec
	for _, b := range topo.Bindings {
		if b.Queue == queue {
			bind = b
		}
	}
	st, err := topo.InspectQueue(m.conn, queue)
	if err != nil {
		return 0, err
	}
	_, tmpExists, err := peek(m.conn, tmp.Name)
	if err != nil {
		return 0, err
	}
	// A quorum queue an older eaimq declared, without its delivery limit,
	// is moved as a queue of the other type is: its arguments cannot
	// change in place either.
	moving := st.Exists && (st.Type != to || st.NoLimit)
	if st.Exists && !moving && !tmpExists {
		fmt.Fprintf(m.out, "topology: %s is already a %s queue (%d ready): nothing to move\n", queue, to, st.Messages)
		return 0, nil
	}
	ch, err := m.conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()

	if moving {
		from := string(st.Type)
		if st.NoLimit {
			from += " (without " + topo.DeliveryLimitArg + ")"
		}
		fmt.Fprintf(m.out, "topology: %s: %s -> %s, %d ready claim(s), through %s\n", queue, from, to, st.Messages, tmp.Name)
		if err := step("declare "+tmp.String(), topo.DeclareQueue(ch, tmp)); err != nil {
			return 0, err
		}
		if err := rebind(ch, bind, tmp.Name, queue); err != nil {
			return 0, err
		}
		n, err := m.drain(ctx, queue, st.Type, tmp.Name)
		if err != nil {
			return 0, err
		}
		fmt.Fprintf(m.out, "topology: %s: moved %d claim(s) to %s, deleted the %s %s\n", queue, n, tmp.Name, st.Type, queue)
	}

	if err := step("declare "+spec.String(), topo.DeclareQueue(ch, spec)); err != nil {
		return 0, err
	}
	if !tmpExists && !moving {
		// Neither the old queue nor a temporary one: nothing to move.
		return 0, step("declare "+bind.String(), topo.DeclareBinding(ch, bind))
	}
	if err := rebind(ch, bind, queue, tmp.Name); err != nil {
		return 0, err
	}
	n, err := m.drain(ctx, tmp.Name, to, queue)
	if err != nil {
		return n, err
	}
	fmt.Fprintf(m.out, "topology: %s: moved %d claim(s) from %s into the %s %s, deleted %s\n", queue, n, tmp.Name, to, queue, tmp.Name)
	return n, nil
}

// step is err, if any, said to be from what.
func step(what string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// rebind binds queue to as bind binds its own queue, then unbinds from.
// Unbinding a binding that is not there is a no-op (a rerun).
func rebind(ch *amqp.Channel, bind topo.BindingSpec, to, from string) error {
	if err := ch.QueueBind(to, bind.Key, bind.Exchange, false /* noWait */, nil); err != nil {
		return fmt.Errorf("bind %s -> %s (key %s): %w", bind.Exchange, to, bind.Key, err)
	}
	if err := ch.QueueUnbind(from, bind.Key, bind.Exchange, nil); err != nil {
		return fmt.Errorf("unbind %s -> %s (key %s): %w", bind.Exchange, from, bind.Key, err)
	}
	return nil
}

// peek is a passive declare on a channel of its own (a 404 closes it).
func peek(conn *amqp.Connection, queue string) (q amqp.Queue, exists bool, err error) {
	ch, err := conn.Channel()
	if err != nil {
		return q, false, fmt.Errorf("open channel: %w", err)
	}
	if q, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		if broker.Code(err) == amqp.NotFound {
			return q, false, nil
		}
		return q, false, fmt.Errorf("check queue %s: %w", queue, err)
	}
	ch.Close()
	return q, true, nil
}
