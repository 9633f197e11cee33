package dlq

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/fail"
)

// The window of a walk: how many dead letters the broker pushes to dlq
// before dlq asks for more. The broker holds each one unacked; dlq holds
// at most a window of them in memory, as deliveries it has not handed on
// yet.
const (
	// maxWindow bounds the window, so that a batch of store records stays
	// one query of a few chunks and the first rows print at once.
	maxWindow = 500
	// windowBytes bounds the bodies of one window: the window is this
	// divided by the largest body seen, so 16 MiB claims come one by one.
	windowBytes = 2 << 20
	// idleCheck is how long source waits for a delivery before it asks
	// the broker whether claim.dead still has any ready for it.
	idleCheck = 500 * time.Millisecond
)

// source is the stream of claim.dead's messages one walk takes.
//
// It is basic.consume with basic.qos, one consumer per window: the broker
// pushes a window of messages without waiting for a request per message
// (basic.get costs a round trip each, which made a walk of 100,000 take
// minutes), and stops when the consumer has a window unacked. Nothing is
// acked to make room: a walk must hold every message it looked at, since a
// message given back returns to the head of a classic queue, where the
// next consumer would get it again, and one run would see it twice. So
// when a consumer has delivered its window, source cancels it and starts
// the next; a consumer's prefetch applies to its own deliveries, so the
// next one gets a window of the messages behind. Every message taken this
// way stays the broker's, unacked, until the walk's channel closes (or dlq
// dies): then all of them are back in claim.dead, in their order.
type source struct {
	ch      *amqp.Channel
	queue   string               // claim.dead, or claim.dead.archive
	ds      <-chan amqp.Delivery // the current consumer's; nil before the first
	tag     string
	window  int // the current consumer's prefetch
	got     int // delivered by the current consumer
	largest int // the largest body seen, for the next window
	pending []amqp.Delivery
	seq     int
	idle    time.Duration // idleCheck; a test's own
	held    *held         // counts what is taken (nil: not counted)
	// maxHeld bounds what the broker holds for the walk (0: no bound):
	// taken and not settled. A consumer's window is at most the room
	// left when it starts, and its prefetch keeps it within that window,
	// so the broker never holds more for the walk than maxHeld.
	maxHeld int
}

// room is how many more the walk may take; -1 without a bound.
func (s *source) room() int {
	if s.maxHeld <= 0 || s.held == nil {
		return -1
	}
	return max(0, s.maxHeld-s.held.outstanding())
}

// full says whether the last consumer could not start because the walk
// holds maxHeld already.
func (s *source) full() bool { return s.ds == nil && s.room() == 0 }

// next returns the next deliveries: at least one and at most want, or none
// when claim.dead has no more ready (another client took the rest).
func (s *source) next(ctx context.Context, want int) ([]amqp.Delivery, error) {
	for len(s.pending) < want {
		if s.ds == nil || s.got >= s.window {
			if err := s.nextConsumer(); err != nil {
				return nil, err
			}
			if s.ds == nil {
				break // at the bound: nothing more may be taken
			}
		}
		if len(s.pending) > 0 {
			// Take what is already here without waiting for more.
			if !s.poll() {
				break
			}
			continue
		}
		ok, err := s.wait(ctx)
		if err != nil || !ok {
			return nil, err
		}
	}
	n := min(want, len(s.pending))
	out := s.pending[:n:n]
	s.pending = s.pending[n:]
	return out, nil
}

func (s *source) take(d amqp.Delivery) {
	if s.held != nil {
		s.held.track(&d)
	}
	s.got++
	s.largest = max(s.largest, len(d.Body))
	s.pending = append(s.pending, d)
}

// poll takes one delivery that has arrived already; false when none has.
func (s *source) poll() bool {
	select {
	case d, ok := <-s.ds:
		if ok {
			s.take(d)
			return true
		}
		s.ds = nil // cancelled: the next consumer is started
		return true
	default:
		return false
	}
}

// wait waits for the next delivery and takes it, or takes what a cancel
// drained; ok is false when claim.dead has none ready for this walk.
func (s *source) wait(ctx context.Context) (bool, error) {
	wait := s.idle
	if wait == 0 {
		wait = idleCheck
	}
	idle := time.NewTimer(wait)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case d, ok := <-s.ds:
			if !ok {
				return false, fail.New(fail.Unavailable, fmt.Errorf("consume %s: the broker closed the channel", s.queue))
			}
			s.take(d)
			return true, nil
		case <-idle.C:
			// Nothing came for a while: either claim.dead has nothing
			// ready (another client holds or took the rest), or the
			// broker is slow. Only the first ends the walk.
			q, err := s.ch.QueueDeclarePassive(s.queue, true, false, false, false, nil)
			if err != nil {
				return false, fail.New(fail.Unavailable, fmt.Errorf("count %s: %w", s.queue, err))
			}
			if q.Messages == 0 {
				// A message the broker has sent this consumer and dlq has
				// not received yet is not ready either (a slow broker, a
				// quorum queue under load): none ready does not yet mean
				// none for this walk. After the cancel-ok, everything
				// sent to the consumer is in hand.
				n := len(s.pending)
				if err := s.cancel(); err != nil {
					return false, err
				}
				return len(s.pending) > n, nil
			}
			idle.Reset(wait)
		}
	}
}

// cancel cancels the current consumer, keeping what it delivered before
// its cancel-ok; next starts another when more is wanted.
func (s *source) cancel() error {
	if s.ds == nil {
		return nil
	}
	if err := s.ch.Cancel(s.tag, false /* noWait: wait for cancel-ok */); err != nil {
		return fail.New(fail.Unavailable, fmt.Errorf("cancel the walk's consumer: %w", err))
	}
	// After cancel-ok the broker sends nothing more to it; what it sent
	// before is in the channel until it closes.
	for d := range s.ds {
		s.take(d)
	}
	s.ds = nil
	return nil
}

// nextConsumer cancels the current consumer, keeping what it delivered
// before its cancel-ok, and starts the next with a window sized by the
// largest body seen so far: it starts at 1 (the size is not known yet) and
// at most doubles.
func (s *source) nextConsumer() error {
	if err := s.cancel(); err != nil {
		return err
	}
	w := 1
	if s.window > 0 {
		w = min(2*s.window, maxWindow, max(1, windowBytes/max(s.largest, 1)))
	}
	if r := s.room(); r >= 0 {
		if r == 0 {
			return nil // no consumer: the walk holds all it may
		}
		w = min(w, r)
	}
	// basic.qos with global=false applies to the consumers started after
	// it, each on its own.
	if err := s.ch.Qos(w, 0, false); err != nil {
		return fail.New(fail.Unavailable, fmt.Errorf("basic.qos: %w", err))
	}
	s.seq++
	s.tag = fmt.Sprintf("dlq-walk-%d", s.seq)
	ds, err := s.ch.Consume(s.queue, s.tag, false /* autoAck: never */, false, false, false, nil)
	if err != nil {
		return fail.New(fail.Unavailable, fmt.Errorf("consume %s: %w", s.queue, err))
	}
	s.ds, s.window, s.got = ds, w, 0
	return nil
}
