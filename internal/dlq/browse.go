package dlq

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/fail"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// Browser walks claim.dead without consuming it.
//
// AMQP 0-9-1 has no "peek": browsing takes each message unacked with
// basic.get and gives it back. Nothing can be lost this way: a message
// taken unacked stays the broker's until it is acked, and every message
// not acked (all of them, for list and show) returns to claim.dead when
// the channel closes, or when the process dies, since the broker requeues
// a closed channel's unacked messages. What changes: the returned messages
// carry redelivered=true, and a classic queue puts them back in their
// original order ahead of anything published meanwhile.
//
// basic.get is not limited by basic.qos, so the walk reaches every message,
// and this process keeps none of them: each is printed (or acted on) and
// dropped, only its delivery tag living on in the broker. Memory stays flat
// for a 100,000-message DLQ; the broker holds the unacked set, which is its
// job anyway.
type Browser struct {
	conn  *amqp.Connection // replay publishes its copies on another channel of it
	ch    *amqp.Channel
	store store.Store // nil when there is none

	// Set by walk: what claim.dead held when the walk started, how many
	// it took, and the -limit it stopped at (0: none).
	total, looked, limit int
}

// NewBrowser opens a channel on conn to walk claim.dead, reading what the
// consumer recorded from st (nil: no store). Closing the channel (Close),
// the connection, or dying returns every message not acked to claim.dead.
func NewBrowser(conn *amqp.Connection, st store.Store) (*Browser, error) {
	ch, err := conn.Channel()
	if err == nil {
		err = topo.RequireQueue(ch, topo.DeadQueue)
	}
	if err != nil {
		return nil, fail.Broker(err, topo.ErrMissing)
	}
	return &Browser{conn: conn, ch: ch, store: st}, nil
}

// Close closes the walk's channel: the dead letters it took and did not
// ack are back in claim.dead.
func (b *Browser) Close() error { return b.ch.Close() }

// walk calls fn for each message claim.dead held when it started, at most
// limit (0: all). fn returns false to stop.
//
// The bound is what keeps one run from meeting its own work again: a
// claim replayed while a consumer runs can be rejected and dead-lettered
// again within milliseconds, and it lands behind every message that was
// there before. Walking "until basic.get finds nothing" would take it
// again, and replay it again, for as long as the consumer keeps up.
func (b *Browser) walk(ctx context.Context, limit int, fn func(*dead) (bool, error)) error {
	q, err := b.ch.QueueDeclarePassive(topo.DeadQueue, true, false, false, false, nil)
	if err != nil {
		return fail.New(fail.Unavailable, fmt.Errorf("count %s: %w", topo.DeadQueue, err))
	}
	b.total, b.limit = q.Messages, limit
	n := q.Messages
	if limit > 0 && limit < n {
		n = limit
	}
	for b.looked < n {
		if ctx.Err() != nil {
			return fail.Errorf(fail.Interrupted, "interrupted after %d dead letter(s); the rest stay in claim.dead: %w", b.looked, ctx.Err())
		}
		d, ok, err := b.ch.Get(topo.DeadQueue, false /* autoAck: never */)
		if err != nil {
			return fail.New(fail.Unavailable, fmt.Errorf("basic.get %s: %w", topo.DeadQueue, err))
		}
		if !ok {
			return nil // someone else took the rest
		}
		b.looked++
		m, err := b.describe(ctx, d)
		if err != nil {
			return err
		}
		more, err := fn(m)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// unlooked is how many dead letters -limit left out.
func (b *Browser) unlooked() int {
	if b.limit == 0 || b.looked < b.limit {
		return 0
	}
	return max(0, b.total-b.looked)
}

// beyond qualifies "not found" when -limit cut the walk short.
func (b *Browser) beyond() string {
	if n := b.unlooked(); n > 0 {
		return fmt.Sprintf(" among the first %d (-limit; %d more not looked at)", b.looked, n)
	}
	return ""
}
