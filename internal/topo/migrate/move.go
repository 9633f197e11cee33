package migrate

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/confirm"
	"eaimq/internal/fail"
	"eaimq/internal/topo"
)

// drain moves every claim from src to dst and then deletes src, only if
// it holds no message and has no consumer, so that a claim that arrived
// after the move (published straight to src's name) is never deleted with
// it but moved in another pass.
//
// A classic queue is deleted with ifEmpty and ifUnused, and the broker
// checks both at the moment of deletion. A quorum queue refuses those flags
// (NOT_IMPLEMENTED, which closes the connection), so there the check is a
// passive declare just before an unconditional delete; the window between
// the two is open only to someone who publishes to or consumes from a
// queue nobody else is bound to or told the name of.
func (m *migration) drain(ctx context.Context, src string, srcType topo.QueueType, dst string) (int, error) {
	quorum := srcType == topo.Quorum
	// The channel the claims are taken on stays open until src is
	// deleted. A quorum queue can drop acks that arrive just before their
	// channel closes and return those claims to the queue, though their
	// copies are confirmed in dst (rabbitmq-server#10327); with src gone
	// first, there is nothing to return them to.
	get, err := m.conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("open channel: %w", err)
	}
	defer get.Close()
	total := 0
	for pass := 1; ; pass++ {
		n, err := m.move(ctx, get, src, dst)
		total += n
		if err != nil {
			return total, err
		}
		ch, err := m.conn.Channel()
		if err != nil {
			return total, fmt.Errorf("open channel: %w", err)
		}
		var left amqp.Queue
		if quorum {
			if left, err = ch.QueueDeclarePassive(src, true, false, false, false, nil); err == nil && left.Messages == 0 && left.Consumers == 0 {
				_, err = ch.QueueDelete(src, false /* ifUnused: refused by quorum queues */, false /* ifEmpty: likewise; checked above */, false /* noWait */)
				if err == nil {
					ch.Close()
					return total, nil
				}
			}
		} else {
			_, err = ch.QueueDelete(src, true /* ifUnused */, true /* ifEmpty */, false /* noWait */)
			if err == nil {
				ch.Close()
				return total, nil
			}
		}
		if err != nil && broker.Code(err) != amqp.PreconditionFailed {
			return total, fmt.Errorf("delete empty %s: %w", src, err)
		}
		ch.Close()
		if pass == 3 {
			reason := fmt.Sprintf("%d ready, %d consumer(s)", left.Messages, left.Consumers)
			if err != nil {
				reason = broker.Reason(err)
			}
			return total, fail.Errorf(fail.Config, "%s was not deleted: %s (stop whatever publishes to it by name or consumes from it, and run again)", src, reason)
		}
	}
}

// move takes every message from src with basic.get, unacked, publishes a
// copy with confirms and the mandatory flag to dst through the default
// exchange, and acks the original only once the broker confirmed the copy
// and did not return it. A claim is therefore always in src, in dst, or
// (for at most moveWindow claims, after a crash) in both; never in
// neither. On an error the unacked originals go back to src when their
// channel closes.
func (m *migration) move(ctx context.Context, get *amqp.Channel, src, dst string) (int, error) {
	pch, err := m.conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("open channel: %w", err)
	}
	pub, err := confirm.New(pch, moveWindow, confirmTimeout)
	if err != nil {
		return 0, err
	}
	defer pch.Close()
	moved := 0
	for {
		if err := ctx.Err(); err != nil {
			return moved, fail.Errorf(fail.Interrupted, "interrupted after moving %d claim(s) from %s to %s", moved, src, dst)
		}
		batch, err := take(get, src)
		if err != nil || len(batch) == 0 {
			return moved, err
		}
		n, err := copyBatch(ctx, pub, batch, src, dst)
		if err != nil {
			return moved + n, err
		}
		moved += n
		if moved%(10*moveWindow) == 0 {
			fmt.Fprintf(m.out, "topology: %s -> %s: %d moved\n", src, dst, moved)
		}
		if m.AfterMove != nil {
			if err := m.AfterMove(moved); err != nil {
				return moved, err
			}
		}
	}
}

// take gets up to moveWindow messages from src, unacked.
func take(get *amqp.Channel, src string) ([]amqp.Delivery, error) {
	var batch []amqp.Delivery
	for len(batch) < moveWindow {
		d, ok, err := get.Get(src, false /* autoAck */)
		if err != nil {
			return nil, fmt.Errorf("basic.get from %s: %w", src, err)
		}
		if !ok {
			break
		}
		batch = append(batch, d)
	}
	return batch, nil
}

// copyBatch publishes a copy of each message of batch to dst, waits for
// every confirm, and acks the originals of the copies the broker took. It
// returns how many originals it acked: all of batch, or on an error those
// before the first copy that failed.
func copyBatch(ctx context.Context, pub *confirm.Publisher, batch []amqp.Delivery, src, dst string) (int, error) {
	for _, d := range batch {
		if _, err := pub.Publish(ctx, "", dst, copyOf(d)); err != nil {
			return 0, fmt.Errorf("publish copy to %s: %w", dst, err)
		}
	}
	for i, d := range batch {
		o, err := pub.Await()
		if err == nil && !o.Acked {
			err = fmt.Errorf("the broker did not take the copy of %q (returned %q, nacked %v); it stays in %s", d.MessageId, o.Returned, o.Nacked, src)
		}
		if err != nil {
			// The copies confirmed so far are in dst: ack their
			// originals, so that a rerun does not move them twice.
			if i > 0 {
				batch[i-1].Ack(true /* multiple */)
			}
			return i, fmt.Errorf("move %s to %s: %w", src, dst, err)
		}
	}
	if err := batch[len(batch)-1].Ack(true /* multiple: the whole batch, all confirmed */); err != nil {
		return 0, fmt.Errorf("ack %d moved claim(s) in %s (their copies are in %s): %w", len(batch), src, dst, err)
	}
	return len(batch), nil
}

// copyOf is d as a new publishing: body, every property and every header
// kept (x-death among them, which dlq reads), so that the consumer and dlq
// see the same claim. Only the broker's delivery state (redelivered, a
// quorum queue's x-delivery-count is a header and stays) starts over.
func copyOf(d amqp.Delivery) amqp.Publishing {
	return amqp.Publishing{
		Headers:         d.Headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		UserId:          d.UserId,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}
