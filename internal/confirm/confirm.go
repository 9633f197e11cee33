// Package confirm publishes with publisher confirms and the mandatory flag,
// and says of each message whether the broker took it: acked AND not
// returned. publish and dlq replay both send claims this way.
package confirm

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrTimeout: no confirm came in time, so the outcome of what is
// outstanding is unknown.
var ErrTimeout = errors.New("no confirm from the broker in time")

// Publisher is one confirming channel.
//
// The client library delivers basic.return and basic.ack/nack from its one
// reader goroutine, with blocking sends into the channels registered by
// NotifyReturn and NotifyPublish; if those fill up, the reader blocks and
// so does every publish (the deadlock amqp091-go's issues warn about). Both
// are buffered beyond the number of outstanding confirms the caller allows,
// and only the caller's goroutine reads them, in Await.
type Publisher struct {
	ch       *amqp.Channel
	timeout  time.Duration
	returns  chan amqp.Return
	confirms chan amqp.Confirmation
	closed   chan *amqp.Error
	ids      map[uint64]string   // delivery tag → message_id, until confirmed
	returned map[string][]string // message_id → returns not yet matched to a confirm
	next     uint64
}

// New puts ch in confirm mode for up to window outstanding confirms; Await
// waits at most timeout for each. The Publisher owns ch from then on.
func New(ch *amqp.Channel, window int, timeout time.Duration) (*Publisher, error) {
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	return &Publisher{
		ch:       ch,
		timeout:  timeout,
		returns:  ch.NotifyReturn(make(chan amqp.Return, window+1)),
		confirms: ch.NotifyPublish(make(chan amqp.Confirmation, window+1)),
		closed:   ch.NotifyClose(make(chan *amqp.Error, 1)),
		ids:      make(map[uint64]string, window),
		returned: make(map[string][]string),
		next:     ch.GetNextPublishSeqNo(),
	}, nil
}

// Publish sends msg with the mandatory flag and returns its delivery tag.
func (p *Publisher) Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) (uint64, error) {
	if err := p.ch.PublishWithContext(ctx, exchange, key, true /* mandatory */, false /* immediate */, msg); err != nil {
		return 0, err
	}
	tag := p.next
	p.ids[tag] = msg.MessageId
	p.next++
	return tag, nil
}

// Outcome is the broker's word on one message.
type Outcome struct {
	Tag      uint64
	Acked    bool   // basic.ack and not returned: the broker has it in a queue
	Returned string // "312 NO_ROUTE" when it was returned (its ack means nothing)
	Nacked   bool   // basic.nack: the broker refused it
}

// Await waits for the next confirm, in publish order. It returns ErrTimeout
// when none comes within the timeout, or the channel's error when it closed.
func (p *Publisher) Await() (Outcome, error) {
	timer := time.NewTimer(p.timeout)
	defer timer.Stop()
	for {
		select {
		case r := <-p.returns:
			p.noteReturn(r)
		case c, ok := <-p.confirms:
			if !ok {
				return Outcome{}, p.closeError()
			}
			return p.judge(c), nil
		case <-timer.C:
			return Outcome{}, fmt.Errorf("%w (%s)", ErrTimeout, p.timeout)
		}
	}
}

func (p *Publisher) judge(c amqp.Confirmation) Outcome {
	id := p.ids[c.DeliveryTag]
	delete(p.ids, c.DeliveryTag)
	// The broker sends basic.return before the basic.ack of the same
	// message, and the library pushes both into our buffered channels in
	// that order from one goroutine. So a return that belongs to this
	// confirm is already in p.returns, even if select chose the confirm
	// first: drain before judging. A return carries no delivery tag, only
	// the properties, hence the message_id.
	for {
		select {
		case r := <-p.returns:
			p.noteReturn(r)
			continue
		default:
		}
		break
	}
	o := Outcome{Tag: c.DeliveryTag}
	if rs := p.returned[id]; len(rs) > 0 {
		o.Returned = rs[0]
		if len(rs) == 1 {
			delete(p.returned, id)
		} else {
			p.returned[id] = rs[1:]
		}
		return o
	}
	o.Acked, o.Nacked = c.Ack, !c.Ack
	return o
}

func (p *Publisher) noteReturn(r amqp.Return) {
	p.returned[r.MessageId] = append(p.returned[r.MessageId], fmt.Sprintf("%d %s", r.ReplyCode, r.ReplyText))
}

func (p *Publisher) closeError() error {
	select {
	case e, ok := <-p.closed:
		if ok && e != nil {
			return fmt.Errorf("the broker closed the channel: %w", e)
		}
	default:
	}
	return errors.New("the channel closed while confirms were outstanding")
}
