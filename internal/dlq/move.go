package dlq

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/confirm"
	"eaimq/internal/fail"
	"eaimq/internal/topo"
)

// moveWindow is how many copies a move publishes before it awaits their
// confirms and acks the originals.
const moveWindow = 128

// dest is where a move's copies go: the exchange and routing key they are
// published with (mandatory), the destination's name in messages, and
// what a refusal adds when the broker returns or nacks a copy.
type dest struct {
	exchange, key    string
	name             string
	onReturn, onNack string
}

// queueDest is a queue, reached through the default exchange by its name.
func queueDest(q string) dest {
	return dest{"", q, q, "; it stays where it was", "; it stays where it was"}
}

// claimDest is eai.claim with the lab's routing key: a replay (whose
// refusal says itself that the dead letter stays).
var claimDest = dest{topo.Exchange, topo.RoutingKey, topo.Exchange, "; run topology", ""}

// mover copies the messages of a walk to a destination, the original acked
// only after the broker confirmed the copy and did not return it. It is
// the one confirm-before-ack of this program: replay, purge into the
// archive and restore all move through it. The order is the point: ack
// first and a crash before the copy is in loses the claim; copy first and
// a crash before the ack leaves it in both places, which the consumer's
// dedup record absorbs (a replay) or a second purge or restore finds and
// moves again.
type mover struct {
	p       *confirm.Publisher
	to      dest
	copyOf  func(*dead) amqp.Publishing
	moved   func(key string)
	refused func(key, why string)
	hooks   Hooks
	batch   []*dead
	n       int // moved
	refuses int
}

// newMover opens the confirming channel of a move on b's connection; the
// caller closes it with close.
func newMover(b *Browser, to dest, copyOf func(*dead) amqp.Publishing) (*mover, func(), error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return nil, nil, fail.New(fail.Unavailable, fmt.Errorf("open channel: %w", err))
	}
	p, err := confirm.New(ch, moveWindow, 10*time.Second)
	if err != nil {
		ch.Close()
		return nil, nil, fail.New(fail.Unavailable, err)
	}
	mv := &mover{p: p, to: to, copyOf: copyOf, moved: func(string) {}, refused: func(string, string) {}}
	return mv, func() { ch.Close() }, nil
}

func (mv *mover) take(ctx context.Context, m *dead) error {
	mv.batch = append(mv.batch, m)
	if len(mv.batch) == moveWindow {
		return mv.flush(ctx)
	}
	return nil
}

// flush publishes the batch's copies, awaits their confirms, then acks the
// originals of those the broker took; a returned or nacked copy leaves its
// original where it is.
func (mv *mover) flush(ctx context.Context) error {
	if len(mv.batch) == 0 {
		return nil
	}
	byTag := make(map[uint64]*dead, len(mv.batch))
	for _, m := range mv.batch {
		tag, err := mv.p.Publish(ctx, mv.to.exchange, mv.to.key, mv.copyOf(m))
		if err != nil {
			return fail.New(fail.Unavailable, fmt.Errorf("publish copy of %s to %s: %w", field(m.Key), mv.to.name, err))
		}
		byTag[tag] = m
	}
	var ok []*dead
	for range mv.batch {
		out, err := mv.p.Await()
		if err != nil {
			// Outcome unknown: the originals stay, so the worst case is
			// a message in both places.
			return fail.New(fail.TempFail, fmt.Errorf("%w; the messages of this batch stay where they were", err))
		}
		m := byTag[out.Tag]
		switch {
		case out.Acked:
			ok = append(ok, m)
		case out.Returned != "":
			mv.refuses++
			mv.refused(m.Key, fmt.Sprintf("%s returned the copy (%s)%s", mv.to.name, field(out.Returned), mv.to.onReturn))
		default:
			mv.refuses++
			mv.refused(m.Key, fmt.Sprintf("the broker nacked the copy for %s (full, or refusing)%s", mv.to.name, mv.to.onNack))
		}
	}
	if mv.hooks.AfterConfirm != nil {
		if err := mv.hooks.AfterConfirm(); err != nil {
			return err
		}
	}
	for _, m := range ok {
		if err := m.d.Ack(false); err != nil {
			return fail.New(fail.Unavailable, fmt.Errorf("ack %s (its copy is in %s; the original stays): %w", field(m.Key), mv.to.name, err))
		}
		mv.n++
		mv.moved(m.Key)
	}
	mv.batch = mv.batch[:0]
	return nil
}

// moveSelected walks b and hands what sel selects to take (mv.take, or
// a take that skips some first and hands the rest to mv): one pass over
// what the queue held when the walk started, then what sel resolves at
// its end (the claimIds); then mv flushes its last batch.
func moveSelected(ctx context.Context, b *Browser, sel selection, mv *mover, take func(context.Context, *dead) error) error {
	err := b.walk(ctx, sel.limit, func(m *dead) (bool, error) {
		if !sel.selects(m) {
			return true, nil
		}
		return true, take(ctx, m)
	})
	for _, m := range sel.after() {
		if err == nil {
			err = take(ctx, m)
		}
	}
	if err == nil {
		err = mv.flush(ctx)
	}
	return err
}
