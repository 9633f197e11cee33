package relay

import (
	"slices"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// acker settles one session's deliveries on its channel, one basic.ack,
// nack or reject each, and counts the deliveries taken and not settled
// (the unacked metric). It stands in for the channel as each delivery's
// Acknowledger (took), so the code that settles is the same everywhere.
//
// It used to send the acks that came together (the workers one group
// commit released) as one basic.ack with multiple set. Turned off alone
// (the ablation table in docs/figures.md), that gained the consumer under
// 3% of CPU at prefetch 5 and 50, within the rounds' spread, so it was
// removed with its bookkeeping.
type acker struct {
	ch *amqp.Channel

	send sync.Mutex // held while sending: the channel sees settlements in the order out changes

	mu  sync.Mutex
	out []uint64 // tags taken and not settled, oldest first

	held atomic.Int64 // deliveries taken and not settled (the unacked metric)
}

func newAcker(ch *amqp.Channel) *acker { return &acker{ch: ch} }

// took makes a the Acknowledger of d, taken from the session's channel.
func (a *acker) took(d *amqp.Delivery) {
	a.mu.Lock()
	a.out = append(a.out, d.DeliveryTag) // delivery tags rise on a channel
	a.mu.Unlock()
	a.held.Add(1)
	d.Acknowledger = a
}

// Ack acks tag alone (multiple is never set by the relay).
func (a *acker) Ack(tag uint64, _ bool) error {
	a.send.Lock()
	defer a.send.Unlock()
	err := a.ch.Ack(tag, false)
	a.settled([]uint64{tag}, err)
	a.remove(tag)
	return err
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

// remove forgets tag.
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
