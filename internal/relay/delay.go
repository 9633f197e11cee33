package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
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
//
// The copies go out on a connection of their own, never the consuming
// one. Under a memory or disk alarm the broker stops reading from every
// connection that publishes, acks included: on the consuming connection
// the first copy sent during an alarm would hold every claim of the
// session unacked until it cleared, when taking claims is what frees the
// broker's memory. On its own connection a copy waits for the alarm (its
// claim held, unacked), and the other claims are acked as they finish.
type delayer struct {
	mu   sync.Mutex
	dial func(context.Context) (*amqp.Connection, error)
	log  *slog.Logger
	pub  *confirm.Publisher // nil until the first copy, and after a failure

	connMu sync.Mutex
	conn   *amqp.Connection // the copies' own; nil until the first copy
	closed bool             // the session ended: no new connection

	blocked  atomic.Bool  // the broker blocks this connection's publishes
	episodes atomic.Int64 // how often it began to
}

// errDelayQueueMissing: the broker returned the copy (no such queue).
var errDelayQueueMissing = errors.New("the delay queue is missing")

// errDelayRefused: the broker refused the copy (403: the user may not
// write to the default exchange, through which a copy reaches its queue).
// Like a missing queue it is a setting to fix, not a moment to wait out:
// requeued, the claim would come straight back, and be called again.
var errDelayRefused = errors.New("the broker refused the delayed copy")

// errBlockedAtEnd: the run ended while the broker blocked publishing;
// the copy was not sent.
var errBlockedAtEnd = errors.New("the broker blocks publishing (an alarm) and the run ended: the copy was not sent")

func newDelayer(dial func(context.Context) (*amqp.Connection, error), log *slog.Logger) *delayer {
	return &delayer{dial: dial, log: log}
}

// send publishes a persistent copy of d to the delay queue for delay,
// mandatory and confirmed, with headers. Only the broker's ack without a
// return is success. While the broker blocks publishing, a copy not yet
// sent waits to be sent, and one sent waits for its confirm, until the
// alarm clears or the run ends (soft): the claim stays held meanwhile.
func (x *delayer) send(soft, ctx context.Context, d amqp.Delivery, delay time.Duration, headers amqp.Table) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.pub == nil {
		if err := x.open(ctx); err != nil {
			return err
		}
	}
	// Not sent yet: sent now, it would only sit unread in the socket.
	if !x.waitUnblocked(soft, ctx) {
		return errBlockedAtEnd
	}
	q := retry.QueueName(delay)
	seen := x.episodes.Load()
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
		// A confirm that does not come while the broker blocks this
		// connection comes once the alarm clears: wait for it rather than
		// give the claim back with its copy perhaps on the way (two copies
		// then, which the record absorbs, but a call more). A wait in
		// which a block began, and ended, gets one more.
		for errors.Is(err, confirm.ErrTimeout) && soft.Err() == nil && ctx.Err() == nil {
			now := x.episodes.Load()
			if !x.blocked.Load() && now == seen {
				break
			}
			seen = now
			out, err = x.pub.Await()
		}
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

// open makes the confirming channel, on the copies' connection (dialled
// first if there is none, or it closed).
func (x *delayer) open(ctx context.Context) error {
	x.connMu.Lock()
	defer x.connMu.Unlock()
	if x.closed {
		return errors.New("the session ended")
	}
	if x.conn == nil || x.conn.IsClosed() {
		conn, err := x.dial(ctx)
		if err != nil {
			return fmt.Errorf("connect for delayed copies: %w", err)
		}
		x.conn = conn
		x.blocked.Store(false)
		// The library sends each notice from its reader goroutine and
		// waits for it to be taken: read them all, until the close.
		go x.watchBlocked(conn.NotifyBlocked(make(chan amqp.Blocking, 1)))
	}
	ch, err := x.conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if x.pub, err = confirm.New(ch, 1, 10*time.Second); err != nil {
		x.pub = nil
		return err
	}
	return nil
}

// watchBlocked follows connection.blocked and connection.unblocked.
func (x *delayer) watchBlocked(notes <-chan amqp.Blocking) {
	for b := range notes {
		x.blocked.Store(b.Active)
		if b.Active {
			x.episodes.Add(1)
			x.log.Warn("the broker blocks publishing: delayed copies wait until it lets go; other claims are acked as before", "reason", b.Reason)
		} else {
			x.log.Info("the broker publishes again: delayed copies go on")
		}
	}
}

// waitUnblocked waits while the broker blocks publishing. It returns false
// when the run ended first.
func (x *delayer) waitUnblocked(soft, ctx context.Context) bool {
	for x.blocked.Load() {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-soft.Done():
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// close closes the copies' connection at the end of its session; a copy
// still waiting for its confirm fails, and its claim goes back.
func (x *delayer) close() {
	x.connMu.Lock()
	defer x.connMu.Unlock()
	x.closed = true
	broker.Close(x.conn)
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
