package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/topo"
)

// outcome of one claim.
type outcome int

const (
	pending     outcome = iota
	sent                // confirmed (basic.ack) and not returned
	returned            // basic.return: no queue took it (the ack that follows does not count)
	nacked              // basic.nack: the broker refused it
	unconfirmed         // published, but no confirm came: it may or may not be queued
	notSent             // never published (the run stopped first)
)

// errNoConfirm: the broker did not confirm in time, so the outcome of what
// is outstanding is unknown.
var errNoConfirm = errors.New("no confirm from the broker in time")

// result is what happened to one claim.
type result struct {
	outcome outcome
	reason  string
}

// sender publishes claims on one confirming channel with a window of
// outstanding confirms.
//
// Everything happens in one goroutine: publish while the window has room,
// otherwise wait for a confirm. The client library delivers returns and
// confirms from its single reader goroutine with blocking sends, so both
// notify channels are buffered beyond the window: the reader can never block
// on us, which is the NotifyPublish deadlock the library's issues warn about.
type sender struct {
	ch       *amqp.Channel
	window   int
	timeout  time.Duration
	returns  chan amqp.Return
	confirms chan amqp.Confirmation
	closed   chan *amqp.Error
	// returnedIDs counts basic.returns not yet matched to their confirm, by
	// message_id: a return carries no delivery tag, only the properties.
	returnedIDs map[string][]string
	progress    func(done int)
}

func newSender(conn *amqp.Connection, window int, timeout time.Duration) (*sender, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	s := &sender{
		ch:          ch,
		window:      window,
		timeout:     timeout,
		returns:     ch.NotifyReturn(make(chan amqp.Return, window+1)),
		confirms:    ch.NotifyPublish(make(chan amqp.Confirmation, window+1)),
		closed:      ch.NotifyClose(make(chan *amqp.Error, 1)),
		returnedIDs: make(map[string][]string),
	}
	return s, nil
}

// send publishes every claim and fills results (indexed like claims).
// It returns early with an error when the channel dies or a confirm does not
// come within the timeout; claims published but not confirmed by then are
// "unconfirmed", the rest "not sent".
func (s *sender) send(ctx context.Context, claims []claim, results []result) error {
	inflight := make(map[uint64]int, s.window) // delivery tag → claim index
	tag := s.ch.GetNextPublishSeqNo()
	done := 0
	var runErr error

	finish := func(c amqp.Confirmation) {
		i, ok := inflight[c.DeliveryTag]
		if !ok {
			return
		}
		delete(inflight, c.DeliveryTag)
		// The broker sends basic.return before the basic.ack of the same
		// message, and the library pushes them into our buffered channels
		// in that order from one goroutine. So every return that belongs
		// to this confirm is already in s.returns: drain it before judging.
		s.drainReturns()
		switch {
		case s.takeReturn(claims[i].guid, &results[i]):
		case c.Ack:
			results[i] = result{outcome: sent}
		default:
			results[i] = result{outcome: nacked, reason: "the broker refused it (basic.nack: a queue limit with reject-publish, or a broker error)"}
		}
		done++
		if s.progress != nil {
			s.progress(done)
		}
	}

	// await waits for one confirm; false means stop.
	await := func() bool {
		timer := time.NewTimer(s.timeout)
		defer timer.Stop()
		for {
			select {
			case r := <-s.returns:
				s.returnedIDs[r.MessageId] = append(s.returnedIDs[r.MessageId], fmt.Sprintf("%d %s", r.ReplyCode, r.ReplyText))
			case c, ok := <-s.confirms:
				if !ok {
					runErr = s.closeError()
					return false
				}
				finish(c)
				return true
			case <-timer.C:
				runErr = fmt.Errorf("%w (-timeout %s)", errNoConfirm, s.timeout)
				return false
			}
		}
	}

	for i := range claims {
		if results[i].outcome != pending {
			continue
		}
		if ctx.Err() != nil {
			runErr = ctx.Err()
			break
		}
		for len(inflight) >= s.window && runErr == nil {
			await()
		}
		if runErr != nil {
			break
		}
		c := claims[i]
		err := s.ch.PublishWithContext(ctx, topo.Exchange, topo.RoutingKey, true /* mandatory */, false /* immediate */, amqp.Publishing{
			DeliveryMode: amqp.Persistent, // a durable queue keeps only persistent messages across a restart
			ContentType:  "application/json",
			MessageId:    c.guid,
			Timestamp:    time.Now(),
			AppId:        "eaimq-publish",
			Body:         c.body,
		})
		if err != nil {
			runErr = fmt.Errorf("publish %s: %w", c.name, err)
			break
		}
		inflight[tag] = i
		tag++
	}
	for len(inflight) > 0 && runErr == nil {
		await()
	}
	for _, i := range inflight {
		results[i] = result{outcome: unconfirmed, reason: "published, but no confirm came: it may or may not be queued; publishing it again is safe (the consumer deduplicates by message_id)"}
	}
	for i := range results {
		if results[i].outcome == pending {
			results[i] = result{outcome: notSent, reason: "not published: the run stopped first"}
		}
	}
	return runErr
}

func (s *sender) drainReturns() {
	for {
		select {
		case r := <-s.returns:
			s.returnedIDs[r.MessageId] = append(s.returnedIDs[r.MessageId], fmt.Sprintf("%d %s", r.ReplyCode, r.ReplyText))
		default:
			return
		}
	}
}

// takeReturn matches one pending return of guid to the claim being
// confirmed: a returned message is acked too, and that ack means nothing.
func (s *sender) takeReturn(guid string, r *result) bool {
	rs := s.returnedIDs[guid]
	if len(rs) == 0 {
		return false
	}
	*r = result{outcome: returned, reason: "unroutable: no queue is bound for eai.claim/claim (basic.return " + rs[0] + "); run topology"}
	if len(rs) == 1 {
		delete(s.returnedIDs, guid)
	} else {
		s.returnedIDs[guid] = rs[1:]
	}
	return true
}

func (s *sender) closeError() error {
	select {
	case e, ok := <-s.closed:
		if ok && e != nil {
			return fmt.Errorf("the broker closed the channel: %w", e)
		}
	default:
	}
	return errors.New("the channel closed while confirms were outstanding")
}

func (s *sender) close() { s.ch.Close() }
