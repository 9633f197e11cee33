package dlq

import (
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// giveBackWait bounds how long Close waits for the dead letters a walk
// held to be ready again.
const giveBackWait = 5 * time.Second

// held counts what a Browser's walks took and what of it was settled
// (acked when moved), so that Close knows how many its channel gives back.
type held struct {
	taken, settled atomic.Int64
}

// track makes d count in h when it is taken, and again when it is settled.
func (h *held) track(d *amqp.Delivery) {
	h.taken.Add(1)
	d.Acknowledger = settling{d.Acknowledger, h}
}

func (h *held) outstanding() int { return int(h.taken.Load() - h.settled.Load()) }

// settling counts each settlement of one delivery (dlq never settles
// several at once: multiple is always false).
type settling struct {
	amqp.Acknowledger
	h *held
}

func (s settling) Ack(tag uint64, multiple bool) error {
	s.h.settled.Add(1)
	return s.Acknowledger.Ack(tag, multiple)
}

func (s settling) Nack(tag uint64, multiple, requeue bool) error {
	s.h.settled.Add(1)
	return s.Acknowledger.Nack(tag, multiple, requeue)
}

func (s settling) Reject(tag uint64, requeue bool) error {
	s.h.settled.Add(1)
	return s.Acknowledger.Reject(tag, requeue)
}

// Close closes the walk's channel, which gives back every dead letter the
// walk took and did not ack, and waits (at most giveBackWait) until the
// queue counts them ready again. A classic queue has them back by the
// close-ok; a quorum queue takes them back after the channel is gone, and
// under load that is later than a next command's first look: a dlq show
// run right after a dlq list found a quorum claim.dead empty
// (TestCrashLoopShownAndReplayed, on a loaded machine). The next walk,
// in this process or another, sees them all.
func (b *Browser) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	n := b.held.outstanding()
	if n == 0 {
		return b.ch.Close()
	}
	// Ready now, without the ones this channel holds.
	q, qerr := b.ch.QueueDeclarePassive(b.queue, true, false, false, false, nil)
	if err := b.ch.Close(); err != nil || qerr != nil {
		return err
	}
	ch, err := b.conn.Channel()
	if err != nil {
		return nil // the connection is going: the broker gives them back
	}
	defer ch.Close()
	want := q.Messages + n
	for deadline := time.Now().Add(giveBackWait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		// Another client taking some meanwhile keeps the count below; the
		// bound ends the wait then.
		if q, err := ch.QueueDeclarePassive(b.queue, true, false, false, false, nil); err != nil || q.Messages >= want {
			return nil
		}
	}
	return nil
}
