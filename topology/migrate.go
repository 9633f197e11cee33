package main

import (
	"context"
	"fmt"
	"io"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/confirm"
	"eaimq/internal/topo"
)

// moveWindow is how many messages one batch of a move holds unacked in the
// old queue while their copies wait for confirms. Between batches nothing
// is in flight, so a stop there (a signal, the test hook) leaves no copy
// behind; a crash inside a batch can leave at most this many claims in
// both queues, with the same message_id, which the consumer's dedup record
// absorbs.
const moveWindow = 100

// confirmTimeout bounds the wait for one copy's confirm; a quorum queue
// confirms once a majority of its members has written the copy.
const confirmTimeout = 30 * time.Second

// afterMove, when set (tests only), runs after each batch of a move is
// confirmed and acked, with the number moved so far by that move;
// returning an error stops the migration there, as a crash would.
var afterMove func(moved int) error

// migrating is the name of the temporary queue that holds queue's claims
// while queue is deleted and declared again with the other type.
func migrating(queue string) string { return queue + ".migrating" }

// typePlan is the message for a queue that exists with the other type:
// what is there, why it cannot simply be redeclared, and the command that
// moves it.
func typePlan(queue, vhost string, st topo.QueueState, want topo.QueueType) string {
	return fmt.Sprintf("queue %s in vhost %q is a %s queue holding %d ready claim(s); -queue-type %s wants a %s queue\n"+
		"  a queue's type cannot be changed in place, and deleting it would delete its claims.\n"+
		"  plan: stop the consumers, then run\n"+
		"          topology -migrate %s\n"+
		"        with the same EAI_AMQP_URL. It moves every claim of claim.in and claim.dead into\n"+
		"        %s queues of the same names, each confirmed in the new queue before it leaves\n"+
		"        the old one, and can be run again if it stops midway.",
		queue, vhost, st.Type, st.Messages, want, want, want, want)
}

// runMigrate moves claim.dead, then claim.in, to queue type to, without
// losing a claim: see migrateQueue. It refuses before moving anything when
// a consumer is attached to either queue or a queue matches neither type.
func runMigrate(ctx context.Context, conn *amqp.Connection, vhost string, to topo.QueueType, stdout io.Writer) error {
	// The exchanges must exist for the bindings the move shifts around.
	ch, err := conn.Channel()
	if err != nil {
		return cli.Exit(cli.ExitUnavailable, fmt.Errorf("open channel: %w", err))
	}
	for _, s := range topo.Exchanges {
		if err := topo.DeclareExchange(ch, s); err != nil {
			return explain(conn, &topo.DeclareError{Kind: "exchange", Name: s.Name, Object: s.String(), Err: err}, vhost, to)
		}
	}
	ch.Close()

	unlock, err := lock(conn, vhost)
	if err != nil {
		return err
	}
	defer unlock()

	queues := []string{topo.DeadQueue, topo.Queue} // the contract's order
	for _, q := range queues {
		st, err := topo.InspectQueue(conn, q)
		if err != nil {
			return cli.Exit(cli.ExitUnavailable, err)
		}
		if st.Exists && st.Type == "" {
			return cli.Exitf(cli.ExitConfig, "queue %s in vhost %q matches neither the classic nor the quorum contract (%s); "+
				"run topology to see the remedy", q, vhost, st.Differs)
		}
		tmp, _, err := peek(conn, migrating(q))
		if err != nil {
			return cli.Exit(cli.ExitUnavailable, err)
		}
		for name, n := range map[string]int{q: st.Consumers, migrating(q): tmp.Consumers} {
			if n > 0 {
				// A consumer would take claims from under the move, and
				// an old queue with a consumer is not deleted.
				return cli.Exitf(cli.ExitConfig, "%d consumer(s) attached to %s in vhost %q: stop the consumers first; "+
					"a consumer would race the move", n, name, vhost)
			}
		}
	}
	total := 0
	for _, q := range queues {
		n, err := migrateQueue(ctx, conn, vhost, q, to, stdout)
		total += n
		if err != nil {
			if cli.Code(err) == cli.ExitFailure || cli.Code(err) == cli.ExitOK {
				err = cli.Exit(cli.ExitUnavailable, err)
			}
			return fmt.Errorf("%w\n  every claim is in %s or %s; run topology -migrate %s again to finish",
				err, q, migrating(q), to)
		}
	}
	// Whatever else of the contract is missing (a binding after a crash
	// between two steps), as a plain declaration of type to would.
	if err := topo.DeclareFor(conn, to); err != nil {
		return explain(conn, err, vhost, to)
	}
	fmt.Fprintf(stdout, "topology: migrated claim.in and claim.dead to %s queues in vhost %q: moved %d claim(s)\n", to, vhost, total)
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
		return nil, cli.Exit(cli.ExitUnavailable, fmt.Errorf("open channel: %w", err))
	}
	_, err = ch.QueueDeclare(lockQueue, false /* durable */, true /* autoDelete */, true /* exclusive */, false /* noWait */, nil)
	if broker.Code(err) == amqp.ResourceLocked {
		return nil, cli.Exitf(cli.ExitTempFail, "another topology -migrate is running in vhost %q (it holds %s), or one that stopped "+
			"still has its connection open at the broker; run again when it has finished or its connection is gone", vhost, lockQueue)
	}
	if err != nil {
		return nil, cli.Exit(cli.ExitUnavailable, fmt.Errorf("declare %s: %w", lockQueue, err))
	}
	return func() {
		// Deleted now rather than when the connection closes, so that
		// the vhost holds only the contract's queues once topology exits.
		ch.QueueDelete(lockQueue, false, false, false)
		ch.Close()
	}, nil
}

// migrateQueue moves queue (with its binding) to type to and returns how
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
func migrateQueue(ctx context.Context, conn *amqp.Connection, vhost, queue string, to topo.QueueType, stdout io.Writer) (int, error) {
	spec := topo.SpecFor(to, queue)
	tmp := topo.QueueSpec{Name: migrating(queue), Args: spec.Args}
	var bind topo.BindingSpec
	for _, b := range topo.Bindings {
		if b.Queue == queue {
			bind = b
		}
	}
	st, err := topo.InspectQueue(conn, queue)
	if err != nil {
		return 0, err
	}
	_, tmpExists, err := peek(conn, tmp.Name)
	if err != nil {
		return 0, err
	}
	if st.Exists && st.Type == to && !tmpExists {
		fmt.Fprintf(stdout, "topology: %s is already a %s queue (%d ready): nothing to move\n", queue, to, st.Messages)
		return 0, nil
	}
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	step := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}

	if st.Exists && st.Type != to {
		fmt.Fprintf(stdout, "topology: %s: %s -> %s, %d ready claim(s), through %s\n", queue, st.Type, to, st.Messages, tmp.Name)
		if err := step("declare "+tmp.String(), topo.DeclareQueue(ch, tmp)); err != nil {
			return 0, err
		}
		if err := rebind(ch, bind, tmp.Name, queue); err != nil {
			return 0, err
		}
		n, err := drain(ctx, conn, queue, st.Type, tmp.Name, stdout)
		if err != nil {
			return 0, err
		}
		fmt.Fprintf(stdout, "topology: %s: moved %d claim(s) to %s, deleted the %s %s\n", queue, n, tmp.Name, st.Type, queue)
	}

	if err := step("declare "+spec.String(), topo.DeclareQueue(ch, spec)); err != nil {
		return 0, err
	}
	if !tmpExists && !(st.Exists && st.Type != to) {
		// Neither the old queue nor a temporary one: nothing to move.
		return 0, step("declare "+bind.String(), topo.DeclareBinding(ch, bind))
	}
	if err := rebind(ch, bind, queue, tmp.Name); err != nil {
		return 0, err
	}
	n, err := drain(ctx, conn, tmp.Name, to, queue, stdout)
	if err != nil {
		return n, err
	}
	fmt.Fprintf(stdout, "topology: %s: moved %d claim(s) from %s into the %s %s, deleted %s\n", queue, n, tmp.Name, to, queue, tmp.Name)
	return n, nil
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

// drain moves every claim from src to dst and then deletes src, only if
// it holds no message and has no consumer, so that a claim that arrived
// after the move (published straight to src's name) is never deleted with
// it but moved in another pass.
//
// A classic queue is deleted with ifEmpty and ifUnused, and the broker
// checks both at the moment of deletion. A quorum queue refuses those flags
// (NOT_IMPLEMENTED, which closes the connection), so there the check is a
// passive declare just before an unconditional delete; the window between
// the two is open only to someone who publishes to or consumes from a
// queue nobody else is bound to or told the name of.
func drain(ctx context.Context, conn *amqp.Connection, src string, srcType topo.QueueType, dst string, stdout io.Writer) (int, error) {
	quorum := srcType == topo.Quorum
	// The channel the claims are taken on stays open until src is
	// deleted. A quorum queue can drop acks that arrive just before their
	// channel closes and return those claims to the queue, though their
	// copies are confirmed in dst (rabbitmq-server#10327); with src gone
	// first, there is nothing to return them to.
	get, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("open channel: %w", err)
	}
	defer get.Close()
	total := 0
	for pass := 1; ; pass++ {
		n, err := move(ctx, conn, get, src, dst, stdout)
		total += n
		if err != nil {
			return total, err
		}
		ch, err := conn.Channel()
		if err != nil {
			return total, fmt.Errorf("open channel: %w", err)
		}
		var left amqp.Queue
		if quorum {
			if left, err = ch.QueueDeclarePassive(src, true, false, false, false, nil); err == nil && left.Messages == 0 && left.Consumers == 0 {
				_, err = ch.QueueDelete(src, false /* ifUnused: refused by quorum queues */, false /* ifEmpty: likewise; checked above */, false /* noWait */)
				if err == nil {
					ch.Close()
					return total, nil
				}
			}
		} else {
			_, err = ch.QueueDelete(src, true /* ifUnused */, true /* ifEmpty */, false /* noWait */)
			if err == nil {
				ch.Close()
				return total, nil
			}
		}
		if err != nil && broker.Code(err) != amqp.PreconditionFailed {
			return total, fmt.Errorf("delete empty %s: %w", src, err)
		}
		ch.Close()
		if pass == 3 {
			reason := fmt.Sprintf("%d ready, %d consumer(s)", left.Messages, left.Consumers)
			if err != nil {
				reason = broker.Reason(err)
			}
			return total, cli.Exitf(cli.ExitConfig, "%s was not deleted: %s (stop whatever publishes to it by name or consumes from it, and run again)", src, reason)
		}
	}
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

// move takes every message from src with basic.get, unacked, publishes a
// copy with confirms and the mandatory flag to dst through the default
// exchange, and acks the original only once the broker confirmed the copy
// and did not return it. A claim is therefore always in src, in dst, or
// (for at most moveWindow claims, after a crash) in both; never in
// neither. On an error the unacked originals go back to src when their
// channel closes.
func move(ctx context.Context, conn *amqp.Connection, get *amqp.Channel, src, dst string, stdout io.Writer) (int, error) {
	pch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("open channel: %w", err)
	}
	pub, err := confirm.New(pch, moveWindow, confirmTimeout)
	if err != nil {
		return 0, err
	}
	defer pch.Close()
	moved := 0
	for {
		if err := ctx.Err(); err != nil {
			return moved, cli.Exit(cli.ExitInterrupted, fmt.Errorf("interrupted after moving %d claim(s) from %s to %s", moved, src, dst))
		}
		var batch []amqp.Delivery
		for len(batch) < moveWindow {
			d, ok, err := get.Get(src, false /* autoAck */)
			if err != nil {
				return moved, fmt.Errorf("basic.get from %s: %w", src, err)
			}
			if !ok {
				break
			}
			batch = append(batch, d)
		}
		if len(batch) == 0 {
			return moved, nil
		}
		for _, d := range batch {
			if _, err := pub.Publish(ctx, "", dst, copyOf(d)); err != nil {
				return moved, fmt.Errorf("publish copy to %s: %w", dst, err)
			}
		}
		for i, d := range batch {
			o, err := pub.Await()
			if err == nil && !o.Acked {
				err = fmt.Errorf("the broker did not take the copy of %q (returned %q, nacked %v); it stays in %s", d.MessageId, o.Returned, o.Nacked, src)
			}
			if err != nil {
				// The copies confirmed so far are in dst: ack their
				// originals, so that a rerun does not move them twice.
				if i > 0 {
					batch[i-1].Ack(true /* multiple */)
				}
				return moved + i, fmt.Errorf("move %s to %s: %w", src, dst, err)
			}
		}
		if err := batch[len(batch)-1].Ack(true /* multiple: the whole batch, all confirmed */); err != nil {
			return moved, fmt.Errorf("ack %d moved claim(s) in %s (their copies are in %s): %w", len(batch), src, dst, err)
		}
		moved += len(batch)
		if moved%(10*moveWindow) == 0 {
			fmt.Fprintf(stdout, "topology: %s -> %s: %d moved\n", src, dst, moved)
		}
		if afterMove != nil {
			if err := afterMove(moved); err != nil {
				return moved, err
			}
		}
	}
}

// copyOf is d as a new publishing: body, every property and every header
// kept (x-death among them, which dlq reads), so that the consumer and dlq
// see the same claim. Only the broker's delivery state (redelivered, a
// quorum queue's x-delivery-count is a header and stays) starts over.
func copyOf(d amqp.Delivery) amqp.Publishing {
	return amqp.Publishing{
		Headers:         d.Headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		UserId:          d.UserId,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}
