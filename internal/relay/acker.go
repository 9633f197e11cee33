package relay

import (
	"slices"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// acker settles one session's deliveries on its channel, and sends the
// acks that come together as one: the workers a group commit releases at
// the same moment ack at the same moment, and a run of them from the
// oldest delivery not yet settled goes out as one basic.ack with multiple
// set, one frame and one write instead of a few. It stands in for the
// channel as each delivery's Acknowledger (took), so the code that acks
// is the same with or without it.
//
// The one rule that makes multiple safe: basic.ack(T, multiple) settles
// every delivery up to T the broker still counts unacked, so T is only
// ever the end of a run that starts at the oldest delivery taken and not
// settled, and holds nothing but deliveries whose ack is being sent. A
// delivery still at the partner, or one to be rejected or requeued,
// breaks the run; the acks past it go out one by one, at once, never held
// back for it (a held ack would hold a prefetch slot).
//
// Workers combine: each puts its ack in pending and takes the sending
// lock; whoever holds it sends every pending ack, so while one write is
// under way the acks that arrive meanwhile queue up for the next. Each
// Ack returns once its own ack was written, with its error.
//
// What it buys: the rows "ack batching" of the ablation table in
// docs/figures.md (the consumer's CPU at prefetch 5 and 50 with every ack
// sent alone), and the before/after runs beside them.
type acker struct {
	ch *amqp.Channel

	send sync.Mutex // held while sending: the channel sees settlements in the order out changes

	mu      sync.Mutex
	out     []uint64 // tags taken and not settled, oldest first
	pending []ackReq // acks waiting for a sender

	held atomic.Int64 // deliveries taken and not settled (the unacked metric)

	alone bool // Hooks.NoAckBatch: each ack sent by itself (benchmarks)
}

type ackReq struct {
	tag  uint64
	done chan error
}

func newAcker(ch *amqp.Channel, alone bool) *acker { return &acker{ch: ch, alone: alone} }

// took makes a the Acknowledger of d, taken from the session's channel.
func (a *acker) took(d *amqp.Delivery) {
	a.mu.Lock()
	a.out = append(a.out, d.DeliveryTag) // delivery tags rise on a channel
	a.mu.Unlock()
	a.held.Add(1)
	d.Acknowledger = a
}

// Ack acks tag (multiple is never set by the relay: one delivery each),
// alone or in a run with others.
func (a *acker) Ack(tag uint64, _ bool) error {
	if a.alone {
		a.send.Lock()
		defer a.send.Unlock()
		err := a.ch.Ack(tag, false)
		a.settled([]uint64{tag}, err)
		a.remove(tag)
		return err
	}
	req := ackReq{tag: tag, done: make(chan error, 1)}
	a.mu.Lock()
	a.pending = append(a.pending, req)
	a.mu.Unlock()
	a.send.Lock()
	select {
	case err := <-req.done: // the sender before us took ours along
		a.send.Unlock()
		return err
	default:
	}
	a.mu.Lock()
	batch := a.pending
	a.pending = nil
	a.mu.Unlock()
	a.flush(batch)
	a.send.Unlock()
	return <-req.done
}

// flush sends batch's acks (under send): the run from the oldest delivery
// not settled as one, the rest one by one.
func (a *acker) flush(batch []ackReq) {
	acking := make(map[uint64]bool, len(batch))
	for _, r := range batch {
		acking[r.tag] = true
	}
	a.mu.Lock()
	run := 0
	for run < len(a.out) && acking[a.out[run]] {
		run++
	}
	runTags := slices.Clone(a.out[:run])
	a.mu.Unlock()
	errs := make(map[uint64]error, len(batch))
	if run > 0 {
		err := a.ch.Ack(runTags[run-1], run > 1 /* multiple: the run, and nothing else */)
		a.settled(runTags, err)
		for _, t := range runTags {
			errs[t] = err
			delete(acking, t)
		}
		a.drop(run)
	}
	for t := range acking {
		err := a.ch.Ack(t, false)
		a.settled([]uint64{t}, err)
		errs[t] = err
		a.remove(t)
	}
	for _, r := range batch {
		r.done <- errs[r.tag]
	}
}

// Nack and Reject settle tag alone, at once, in order with the acks.
func (a *acker) Nack(tag uint64, _ bool, requeue bool) error {
	a.send.Lock()
	defer a.send.Unlock()
	err := a.ch.Nack(tag, false, requeue)
	a.settled([]uint64{tag}, err)
	a.remove(tag)
	return err
}

func (a *acker) Reject(tag uint64, requeue bool) error {
	a.send.Lock()
	defer a.send.Unlock()
	err := a.ch.Reject(tag, requeue)
	a.settled([]uint64{tag}, err)
	a.remove(tag)
	return err
}

// settled counts tags as no longer held when the broker was told. A
// failed write leaves them: the channel is gone, and the broker takes
// them back with it.
func (a *acker) settled(tags []uint64, err error) {
	if err == nil {
		a.held.Add(-int64(len(tags)))
	}
}

// drop forgets the first n tags of out; remove forgets tag.
func (a *acker) drop(n int) {
	a.mu.Lock()
	a.out = slices.Delete(a.out, 0, n)
	a.mu.Unlock()
}

func (a *acker) remove(tag uint64) {
	a.mu.Lock()
	if i, ok := slices.BinarySearch(a.out, tag); ok {
		a.out = slices.Delete(a.out, i, i+1)
	}
	a.mu.Unlock()
}

// ChannelOf is the AMQP channel a delivery the relay holds came on: a
// test's hook reaches it through here (the relay's acker stands in for the
// channel as the delivery's Acknowledger).
func ChannelOf(d amqp.Delivery) *amqp.Channel {
	switch a := d.Acknowledger.(type) {
	case *acker:
		return a.ch
	case *amqp.Channel:
		return a
	}
	return nil
}
