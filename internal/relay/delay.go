package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/confirm"
	"eaimq/internal/fail"
	"eaimq/internal/retry"
	"eaimq/internal/topo"
)

// delayer sends a claim's delayed copy to its delay queue (--retry-delays)
// on a confirming channel of its own, one copy at a time: copies are the
// rare path (transient failures), and one outstanding confirm at a time
// makes a return unambiguous. The caller acks the original only after send
// returns nil: the copy is then in the delay queue, durable, and a crash
// before the ack leaves two copies of the claim, which the dedup record
// absorbs, never none.
type delayer struct {
	mu   sync.Mutex
	conn *amqp.Connection
	pub  *confirm.Publisher // nil until the first copy, and after a failure
}

// errDelayQueueMissing: the broker returned the copy (no such queue).
var errDelayQueueMissing = errors.New("the delay queue is missing")

// errDelayRefused: the broker refused the copy (403: the user may not
// write to the default exchange, through which a copy reaches its queue).
// Like a missing queue it is a setting to fix, not a moment to wait out:
// requeued, the claim would come straight back, and be called again.
var errDelayRefused = errors.New("the broker refused the delayed copy")

func newDelayer(conn *amqp.Connection) *delayer { return &delayer{conn: conn} }

// send publishes a persistent copy of d to the delay queue for delay,
// mandatory and confirmed, with headers. Only the broker's ack without a
// return is success.
func (x *delayer) send(ctx context.Context, d amqp.Delivery, delay time.Duration, headers amqp.Table) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.pub == nil {
		ch, err := x.conn.Channel()
		if err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		if x.pub, err = confirm.New(ch, 1, 10*time.Second); err != nil {
			x.pub = nil
			return err
		}
	}
	q := retry.QueueName(delay)
	// The copy is the claim as it was published: same body, message_id and
	// properties (no expiration of its own: the queue's TTL is the delay).
	_, err := x.pub.Publish(ctx, "" /* the default exchange routes to q by name */, q, amqp.Publishing{
		Headers: headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: amqp.Persistent, Priority: d.Priority, CorrelationId: d.CorrelationId,
		MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body,
	})
	var out confirm.Outcome
	if err == nil {
		out, err = x.pub.Await()
	}
	switch {
	case broker.Code(err) == amqp.AccessRefused:
		x.pub = nil
		return fmt.Errorf("%w: send to %s: %v (give the user write permission on amq.default; docs/operations.md)", errDelayRefused, q, err)
	case err != nil:
		x.pub = nil // the channel's state is unknown: start a new one next time
		return fmt.Errorf("send to %s: %w", q, err)
	case out.Returned != "":
		return fmt.Errorf("%w: %s returned the copy (%s)", errDelayQueueMissing, q, out.Returned)
	case !out.Acked:
		return fmt.Errorf("send to %s: the broker nacked the copy", q)
	}
	return nil
}

// checkRetryQueues makes sure every delay queue of the plan exists and
// dead-letters back to claim.in, before the first claim is taken: a copy
// sent to a missing queue would be returned, and the claim could not wait.
func (r *relay) checkRetryQueues(conn *amqp.Connection) error {
	if r.cfg.Retry == nil {
		return nil
	}
	remedy := fmt.Sprintf("run topology -retry-delays %s", r.cfg.Retry)
	for _, d := range r.cfg.Retry.Queues() {
		name := retry.QueueName(d)
		st, differs, err := topo.CheckRetryQueue(conn, name, d)
		switch {
		case broker.Code(err) == amqp.AccessRefused:
			// It exists (the passive declare passed), but this user may not
			// redeclare it, as with claim.in: warn, and trust topology.
			r.cfg.Log.Warn("cannot verify a delay queue's arguments (no configure permission); assuming topology declared them", "queue", name)
		case err != nil:
			return fail.New(fail.Unavailable, err)
		case st == topo.RetryMissing:
			return fail.Errorf(fail.Config, "delay queue %s does not exist in this vhost: %s", name, remedy)
		case st == topo.RetryDiffers:
			return fail.Errorf(fail.Config, "delay queue %s differs from what --retry-delays needs (%s): delete it when empty, then %s", name, differs, remedy)
		}
	}
	return nil
}

// delayMissing is the error that ends the run when a delay queue went away
// mid-run: the claim in hand stays in claim.in, unacked.
func (r *relay) delayMissing(err error) error {
	if errors.Is(err, errDelayRefused) {
		return fail.Errorf(fail.Config, "%v: no claim can wait for its retry, so none is sent there. "+
			"The claims stay in %s; fix the permission, then start the consumer again", err, topo.Queue)
	}
	return fail.Errorf(fail.Config, "%v: no claim can wait for its retry, so none is sent there. "+
		"The claims stay in %s; run topology -retry-delays %s, then start the consumer again", err, topo.Queue, r.cfg.Retry)
}
