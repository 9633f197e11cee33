package publish

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/confirm"
	"eaimq/internal/topo"
)

// outcome of one claim.
type outcome int

const (
	pending     outcome = iota
	sent                // confirmed (basic.ack) and not returned
	returned            // basic.return: no queue took it (the ack that follows does not count)
	nacked              // basic.nack: the broker refused it
	changed             // valid when checked, different (or gone) when read again to send: not sent
	unconfirmed         // published, but no confirm came: it may or may not be queued
	notSent             // never published (the run stopped first)
	invalid             // failed the check before anything was published: never sent
)

// result is what happened to one claim.
type result struct {
	outcome outcome
	reason  string
}

// Timing of send. pollStep is how long one confirm.Await waits before send
// looks at the clock and the context again; drainGrace is how long, after
// a signal, send still waits for the confirms of what it has published, so
// that their outcome is known rather than "unconfirmed".
const (
	pollStep   = 100 * time.Millisecond
	drainGrace = 300 * time.Millisecond
)

// loaded is one claim's bytes, read again for sending.
type loaded struct {
	i     int
	body  []byte
	token bool // body is one of the reader's two buffers: hand it back
	err   error
}

// reader reads the valid claims again, in order, ahead of the sender: two
// buffers take turns, so that reading the next file overlaps publishing
// this one and memory stays at two claims whatever the batch. A claim whose
// bytes were kept needs no buffer and no read.
func reader(ctx context.Context, claims []claim, stop <-chan struct{}) (<-chan loaded, chan<- []byte) {
	ready := make(chan loaded, 64)
	free := make(chan []byte, 2)
	free <- nil
	free <- nil
	go func() {
		defer close(ready)
		for i := range claims {
			c := &claims[i]
			if c.err != nil {
				continue
			}
			l := loaded{i: i, body: c.body}
			if l.body == nil {
				var buf []byte
				select {
				case buf = <-free:
				case <-stop:
					return
				}
				l.body, l.err = reread(ctx, c, buf)
				l.token = true
			}
			select {
			case ready <- l:
			case <-stop:
				return
			}
		}
	}()
	return ready, free
}

// send publishes every valid claim through p with at most cfg.Window
// confirms outstanding, and fills results (indexed like claims). It returns
// early when the channel dies, a confirm does not come within cfg.Timeout,
// or ctx ends; claims published but not confirmed by then are
// "unconfirmed", the rest "not sent". After ctx ends nothing more is
// published, and the confirms of what was are awaited for drainGrace at
// most.
//
// p must have been made with the timeout pollStep: Await's timeout is the
// tick at which send checks its own deadline and the context. abort closes
// the connection under a write the broker has stopped reading (see
// publishOne).
func send(ctx context.Context, p *confirm.Publisher, cfg *Config, claims []claim, results []result, progress func(int), abort func()) error {
	stop := make(chan struct{})
	defer close(stop)
	ready, free := reader(ctx, claims, stop)

	s := &sender{ctx: ctx, p: p, cfg: cfg, claims: claims, results: results, progress: progress,
		inflight: make(map[uint64]int, cfg.Window)}
	s.stall = time.AfterFunc(time.Hour, abort)
	s.stall.Stop()
	defer s.stall.Stop()
	runErr := s.publishAll(ready, free)
	// Even after a signal, wait (briefly) for the outcome of what is out.
	for len(s.inflight) > 0 && (runErr == nil || errors.Is(runErr, context.Canceled)) {
		if err := s.await(); err != nil {
			runErr = err
			break
		}
	}
	for _, i := range s.inflight {
		results[i] = result{outcome: unconfirmed, reason: "published, but no confirm came: it may or may not be queued; publishing it again is safe (the consumer deduplicates by message_id)"}
	}
	for i := range results {
		if results[i].outcome == pending {
			results[i] = result{outcome: notSent, reason: "not published: the run stopped first"}
		}
	}
	return runErr
}

// sender is one run of send: what is published and not yet confirmed, and
// how far the confirms have come.
type sender struct {
	ctx      context.Context
	p        *confirm.Publisher
	cfg      *Config
	claims   []claim
	results  []result
	progress func(int)
	inflight map[uint64]int // delivery tag → claim index
	done     int
	graceEnd time.Time
	stall    *time.Timer // armed for cfg.Timeout around each write; it closes the connection
}

// publishAll publishes what the reader hands over until it has no more,
// ctx ends or a publish or a confirm fails.
func (s *sender) publishAll(ready <-chan loaded, free chan<- []byte) error {
	for {
		var l loaded
		var more bool
		select {
		case l, more = <-ready:
		case <-s.ctx.Done():
		}
		if err := s.ctx.Err(); err != nil {
			return err
		}
		if !more {
			return nil
		}
		if err := s.publishOne(l, free); err != nil {
			return err
		}
	}
}

// publishOne publishes one claim once the window has room for it.
func (s *sender) publishOne(l loaded, free chan<- []byte) error {
	if l.err != nil {
		s.results[l.i] = result{outcome: changed, reason: l.err.Error()}
		if l.token {
			free <- l.body
		}
		return nil
	}
	for len(s.inflight) >= s.cfg.Window {
		if err := s.await(); err != nil {
			return err
		}
	}
	c := &s.claims[l.i]
	// PublishWithContext looks at ctx before it writes and never
	// after: a message goes out whole or not at all. Nor does it bound the
	// write: a broker that stops reading (an alarm, a node stalled in a
	// partition) leaves it blocked once the socket's buffers are full, and
	// no confirm wait is ever reached. So a write that takes longer than
	// -timeout gets the connection closed under it, which fails it.
	s.stall.Reset(s.cfg.Timeout)
	tag, err := s.p.Publish(s.ctx, topo.Exchange, topo.RoutingKey, amqp.Publishing{
		DeliveryMode: amqp.Persistent, // a durable queue keeps only persistent messages across a restart
		ContentType:  "application/json",
		MessageId:    c.guid,
		Timestamp:    time.Now(),
		AppId:        "eaimq-publish",
		Headers:      s.cfg.Headers,
		Body:         l.body,
	})
	// The library has written the frames when Publish returns, so the
	// buffer can be read into again.
	stopped := s.stall.Stop()
	if l.token {
		free <- l.body
	}
	if !stopped {
		// The timer fired, and the connection is being closed under this
		// write, whether or not it got through first. Part of the claim
		// may sit in the socket's buffers: the broker drops a message
		// whose frames stop short, but "may or may not be queued" is the
		// answer that is true either way, and publishing it again is safe.
		if err == nil {
			s.inflight[tag] = l.i
		} else {
			s.results[l.i] = result{outcome: unconfirmed, reason: "its write to the broker stalled past -timeout: it may or may not be queued; publishing it again is safe (the consumer deduplicates by message_id)"}
		}
		return fmt.Errorf("%w (%s): the broker stopped reading while %s was written", confirm.ErrTimeout, s.cfg.Timeout, c.name)
	}
	if err != nil {
		if s.ctx.Err() != nil {
			return s.ctx.Err()
		}
		return fmt.Errorf("publish %s: %w", c.name, err)
	}
	s.inflight[tag] = l.i
	return nil
}

// await waits for the next confirm and records its claim's outcome. Each
// Await is one tick (pollStep): between ticks it gives up after
// cfg.Timeout, or, once ctx has ended, after drainGrace.
func (s *sender) await() error {
	start := time.Now()
	for {
		c, err := s.p.Await()
		if errors.Is(err, confirm.ErrTimeout) {
			if s.ctx.Err() != nil {
				if s.graceEnd.IsZero() {
					s.graceEnd = time.Now().Add(drainGrace)
				}
				if time.Now().After(s.graceEnd) {
					return s.ctx.Err()
				}
			}
			if time.Since(start) >= s.cfg.Timeout {
				return fmt.Errorf("%w (%s)", confirm.ErrTimeout, s.cfg.Timeout)
			}
			continue
		}
		if err != nil {
			return err
		}
		i := s.inflight[c.Tag]
		delete(s.inflight, c.Tag)
		switch {
		case c.Returned != "":
			s.results[i] = result{outcome: returned, reason: "unroutable: no queue is bound for eai.claim/claim (basic.return " + c.Returned + "); run topology"}
		case c.Acked:
			s.results[i] = result{outcome: sent}
		default:
			s.results[i] = result{outcome: nacked, reason: "the broker refused it (basic.nack: a queue limit with reject-publish, or a broker error)"}
		}
		s.done++
		s.progress(s.done)
		return nil
	}
}
