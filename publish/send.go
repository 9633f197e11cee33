package main

import (
	"context"
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
	unconfirmed         // published, but no confirm came: it may or may not be queued
	notSent             // never published (the run stopped first)
)

// result is what happened to one claim.
type result struct {
	outcome outcome
	reason  string
}

// send publishes every valid claim through p with at most window confirms
// outstanding, and fills results (indexed like claims). It returns early
// when the channel dies or a confirm does not come in time; claims published
// but not confirmed by then are "unconfirmed", the rest "not sent".
//
// Everything happens in this one goroutine: publish while the window has
// room, otherwise wait for a confirm.
func send(ctx context.Context, p *confirm.Publisher, window int, claims []claim, results []result, progress func(int)) error {
	inflight := make(map[uint64]int, window) // delivery tag → claim index
	done := 0
	await := func() error {
		o, err := p.Await()
		if err != nil {
			return err
		}
		i := inflight[o.Tag]
		delete(inflight, o.Tag)
		switch {
		case o.Returned != "":
			results[i] = result{outcome: returned, reason: "unroutable: no queue is bound for eai.claim/claim (basic.return " + o.Returned + "); run topology"}
		case o.Acked:
			results[i] = result{outcome: sent}
		default:
			results[i] = result{outcome: nacked, reason: "the broker refused it (basic.nack: a queue limit with reject-publish, or a broker error)"}
		}
		done++
		progress(done)
		return nil
	}

	var runErr error
	for i, c := range claims {
		if results[i].outcome != pending {
			continue
		}
		if runErr = ctx.Err(); runErr != nil {
			break
		}
		for len(inflight) >= window && runErr == nil {
			runErr = await()
		}
		if runErr != nil {
			break
		}
		tag, err := p.Publish(ctx, topo.Exchange, topo.RoutingKey, amqp.Publishing{
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
	}
	for len(inflight) > 0 && runErr == nil {
		runErr = await()
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
