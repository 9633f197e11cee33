package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/cli"
	"eaimq/internal/confirm"
	"eaimq/internal/topo"
)

// replayHeader counts how often a claim was replayed from the DLQ.
const replayHeader = "x-eaimq-replays"

// replayWindow is how many copies are published before their confirms are
// awaited and their dead copies acked.
const replayWindow = 128

// afterConfirm, when set (tests only), runs after a batch is confirmed and
// before its dead copies are acked; returning an error stops the replay
// there, as a crash would.
var afterConfirm func() error

// replay publishes a copy of each selected dead letter to eai.claim and acks
// the dead copy only after the broker confirmed and routed the copy. The
// order is the whole point: ack first and a crash before the publish loses
// the claim; publish first and a crash before the ack leaves a duplicate,
// which the consumer's dedup record absorbs.
func replay(ctx context.Context, conn *amqp.Connection, b *browser, o *options, stdout, stderr io.Writer) error {
	ch, err := conn.Channel()
	if err == nil {
		err = topo.RequireExchange(ch, topo.Exchange)
	}
	if err != nil {
		return cli.Broker(err, topo.ErrMissing)
	}
	p, err := confirm.New(ch, replayWindow, 10*time.Second)
	if err != nil {
		return cli.Exit(cli.ExitUnavailable, err)
	}

	var replayed, skipped, again, capped, refused int
	sent := map[string]bool{} // the keys replayed (or being replayed) in this run
	var batch []*dead
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		byTag := make(map[uint64]*dead, len(batch))
		for _, m := range batch {
			tag, err := p.Publish(ctx, topo.Exchange, topo.RoutingKey, copyOf(m))
			if err != nil {
				return cli.Exit(cli.ExitUnavailable, fmt.Errorf("publish copy of %s: %w", field(m.Key), err))
			}
			byTag[tag] = m
		}
		var ok []*dead
		for range batch {
			out, err := p.Await()
			if err != nil {
				// Outcome unknown: the dead copies stay, so the worst case
				// is a duplicate.
				return cli.Exit(cli.ExitTempFail, fmt.Errorf("%w; the dead letters of this batch stay in claim.dead", err))
			}
			m := byTag[out.Tag]
			switch {
			case out.Acked:
				ok = append(ok, m)
			case out.Returned != "":
				refused++
				fmt.Fprintf(stderr, "dlq: %s: not replayed: unroutable (%s); run topology. It stays in claim.dead\n", field(m.Key), field(out.Returned))
			default:
				refused++
				fmt.Fprintf(stderr, "dlq: %s: not replayed: the broker nacked the copy. It stays in claim.dead\n", field(m.Key))
			}
		}
		if afterConfirm != nil {
			if err := afterConfirm(); err != nil {
				return err
			}
		}
		for _, m := range ok {
			if err := m.d.Ack(false); err != nil {
				return cli.Exit(cli.ExitUnavailable, fmt.Errorf("ack dead copy of %s (its replay is queued; the dead copy stays): %w", field(m.Key), err))
			}
			replayed++
			fmt.Fprintf(stdout, "replayed %s\n", field(m.Key))
		}
		batch = batch[:0]
		return nil
	}

	err = b.walk(ctx, o.limit, func(m *dead) (bool, error) {
		if !o.selects(m) {
			return true, nil
		}
		switch {
		case sent[m.Key]:
			// A second copy of a claim replayed in this run (published
			// twice, or dead-lettered again already): one try per run.
			again++
			fmt.Fprintf(stdout, "skipped %s: replayed once already in this run; this copy stays in claim.dead\n", field(m.Key))
			return true, nil
		case m.Known && m.Rec.Delivered() && !o.force:
			skipped++
			fmt.Fprintf(stdout, "skipped %s: the store records it as delivered (-force replays it anyway)\n", field(m.Key))
			return true, nil
		case m.Replays >= int64(o.maxReplays) && !o.force:
			capped++
			fmt.Fprintf(stderr, "dlq: %s: not replayed: replayed %d times already (-max-replays %d); it stays in claim.dead. "+
				"Fix the claim or the partner, then -force\n", field(m.Key), m.Replays, o.maxReplays)
			return true, nil
		}
		sent[m.Key] = true
		batch = append(batch, m)
		if len(batch) == replayWindow {
			return true, flush()
		}
		return true, nil
	})
	if err == nil {
		err = flush()
	}
	fmt.Fprintf(stdout, "dlq: %d replayed, %d skipped as delivered, %d skipped as replayed in this run, %d over -max-replays, %d refused by the broker\n",
		replayed, skipped, again, capped, refused)
	if err != nil {
		return err
	}
	missing := o.missing(stderr, b)
	if refused+capped+missing > 0 {
		return cli.Exitf(cli.ExitFailure, "%d over -max-replays, %d refused by the broker, %d named ID(s) not in claim.dead", capped, refused, missing)
	}
	return nil
}

// copyOf is the message to replay: the claim as it was first published,
// without the broker's dead-letter headers, with the replay count.
func copyOf(m *dead) amqp.Publishing {
	d := m.d
	headers := amqp.Table{}
	for k, v := range d.Headers {
		if k == "x-death" || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") {
			continue
		}
		headers[k] = v
	}
	headers[replayHeader] = m.Replays + 1
	return amqp.Publishing{
		Headers:       headers,
		ContentType:   d.ContentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     d.MessageId,
		CorrelationId: d.CorrelationId,
		Timestamp:     d.Timestamp,
		AppId:         d.AppId,
		Body:          d.Body,
	}
}
