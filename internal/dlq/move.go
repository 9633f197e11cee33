package dlq

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/confirm"
	"eaimq/internal/fail"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// moveWindow is how many copies a move publishes before it awaits their
// confirms and acks the originals.
const moveWindow = 128

// rowsWindow is moveWindow over ingested rows (a replay's): each flush
// waits for its last confirm and commits twice (the claim, the mark), and
// at 128 a flush that wait was most of a bulk replay's time (100,000
// rows: 782 round trips to the broker's fsync and 1,564 commits; 4,083
// rows a second against publish's 7,224 in BenchmarkDLQReplayRows). The
// rows wait in memory, not in the broker, so a larger batch holds
// nothing of the broker's; a paced replay flushes at most rate at a
// time, once a second, as before.
const rowsWindow = 1000

// dest is where a move's copies go: the exchange and routing key they are
// published with (mandatory), the destination's name in messages, and
// what a refusal adds when the broker returns or nacks a copy.
type dest struct {
	exchange, key    string
	name             string
	onReturn, onNack string
}

// queueDest is a queue, reached through the default exchange by its name.
func queueDest(q string) dest {
	return dest{"", q, q, "; it stays where it was", "; it stays where it was"}
}

// claimDest is eai.claim with the lab's routing key: a replay (whose
// refusal says itself that the dead letter stays).
var claimDest = dest{topo.Exchange, topo.RoutingKey, topo.Exchange, "; run topology", ""}

// mover copies the messages of a walk to a destination, the original acked
// only after the broker confirmed the copy and did not return it. It is
// the one confirm-before-ack of this program: replay, purge into the
// archive and restore all move through it. The order is the point: ack
// first and a crash before the copy is in loses the claim; copy first and
// a crash before the ack leaves it in both places, which the consumer's
// dedup record absorbs (a replay) or a second purge or restore finds and
// moves again.
//
// Over ingested rows (rows set) the original is a row, and the mover
// settles it by its state instead of an ack: see flushRows.
type mover struct {
	p       *confirm.Publisher
	to      dest
	copyOf  func(*dead) amqp.Publishing
	moved   func(key string)
	refused func(key, why string)
	hooks   Hooks
	batch   []*dead
	n       int // moved
	refuses int

	// rows is the source's table when the dead letters are ingested rows
	// (nil: claim.dead's deliveries). actor changes their states; taken
	// is told of a row another replay took first; stale, when not zero,
	// lets a claim take a row left replaying since before it (-force).
	rows  store.DeadLetters
	actor Actor
	taken func(m *dead)
	stale time.Time
	// window is how many copies one flush publishes (moveWindow, or
	// rowsWindow over rows; less when paced); pace spaces the takes out
	// (-rate).
	window int
	pace   pacer
	// flushed, when set, is told after each flush how many were moved so
	// far (replay's progress).
	flushed func(n int)
}

// pacer spaces events out to at most rate a second (0: no pacing).
type pacer struct {
	rate float64
	next time.Time
}

// wait waits for the next event's turn, or until ctx ends.
func (p *pacer) wait(ctx context.Context) error {
	if p.rate <= 0 {
		return nil
	}
	now := time.Now()
	if p.next.After(now) {
		t := time.NewTimer(p.next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		now = p.next
	}
	p.next = now.Add(time.Duration(float64(time.Second) / p.rate))
	return nil
}

// newMover opens the confirming channel of a move on b's connection; the
// caller closes it with close.
func newMover(b *Browser, to dest, copyOf func(*dead) amqp.Publishing) (*mover, func(), error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return nil, nil, fail.New(fail.Unavailable, fmt.Errorf("open channel: %w", err))
	}
	window := moveWindow
	if b.ingested != nil {
		window = rowsWindow
	}
	// The confirm buffers hold the whole window: a flush publishes all of
	// it before it awaits the first confirm.
	p, err := confirm.New(ch, window, 10*time.Second)
	if err != nil {
		ch.Close()
		return nil, nil, fail.New(fail.Unavailable, err)
	}
	mv := &mover{p: p, to: to, copyOf: copyOf, moved: func(string) {}, refused: func(string, string) {}, rows: b.ingested,
		taken: func(*dead) {}, window: window}
	return mv, func() { ch.Close() }, nil
}

// paced spaces the mover's takes out to at most rate a second (0: no
// pacing), a flush at least once a second: a bulk replay of 200,000
// should neither flood the consumer and the partner behind it nor hold a
// batch of claimed rows for long.
func (mv *mover) paced(rate float64) {
	mv.pace.rate = rate
	if rate > 0 {
		mv.window = max(1, min(mv.window, int(rate)))
	}
}

func (mv *mover) take(ctx context.Context, m *dead) error {
	if err := mv.pace.wait(ctx); err != nil {
		return fail.Errorf(fail.Interrupted, "interrupted after %d moved: %w", mv.n, err)
	}
	mv.batch = append(mv.batch, m)
	if len(mv.batch) >= mv.window {
		return mv.flush(ctx)
	}
	return nil
}

// flush publishes the batch's copies, awaits their confirms, then acks the
// originals of those the broker took; a returned or nacked copy leaves its
// original where it is.
func (mv *mover) flush(ctx context.Context) error {
	if len(mv.batch) == 0 {
		return nil
	}
	if mv.rows != nil {
		return mv.flushRows(ctx)
	}
	byTag := make(map[uint64]*dead, len(mv.batch))
	for _, m := range mv.batch {
		tag, err := mv.p.Publish(ctx, mv.to.exchange, mv.to.key, mv.copyOf(m))
		if err != nil {
			return fail.New(fail.Unavailable, fmt.Errorf("publish copy of %s to %s: %w", field(m.Key), mv.to.name, err))
		}
		byTag[tag] = m
	}
	var ok []*dead
	for range mv.batch {
		out, err := mv.p.Await()
		if err != nil {
			// Outcome unknown: the originals stay, so the worst case is
			// a message in both places.
			return fail.New(fail.TempFail, fmt.Errorf("%w; the messages of this batch stay where they were", err))
		}
		m := byTag[out.Tag]
		switch {
		case out.Acked:
			ok = append(ok, m)
		case out.Returned != "":
			mv.refuses++
			mv.refused(m.Key, fmt.Sprintf("%s returned the copy (%s)%s", mv.to.name, field(out.Returned), mv.to.onReturn))
		default:
			mv.refuses++
			mv.refused(m.Key, fmt.Sprintf("the broker nacked the copy for %s (full, or refusing)%s", mv.to.name, mv.to.onNack))
		}
	}
	if mv.hooks.AfterConfirm != nil {
		if err := mv.hooks.AfterConfirm(); err != nil {
			return err
		}
	}
	for _, m := range ok {
		if err := m.d.Ack(false); err != nil {
			return fail.New(fail.Unavailable, fmt.Errorf("ack %s (its copy is in %s; the original stays): %w", field(m.Key), mv.to.name, err))
		}
		mv.n++
		mv.moved(m.Key)
	}
	mv.batch = mv.batch[:0]
	if mv.flushed != nil {
		mv.flushed(mv.n)
	}
	return nil
}

// moveSelected walks b and hands what sel selects to take (mv.take, or
// a take that skips some first and hands the rest to mv): one pass over
// what the queue held when the walk started, then what sel resolves at
// its end (the claimIds); then mv flushes its last batch.
func moveSelected(ctx context.Context, b *Browser, sel selection, mv *mover, take func(context.Context, *dead) error) error {
	err := b.walk(ctx, sel.limit, func(m *dead) (bool, error) {
		if !sel.selects(m) {
			return true, nil
		}
		return true, take(ctx, m)
	})
	for _, m := range sel.after() {
		if err == nil {
			err = take(ctx, m)
		}
	}
	if err == nil {
		err = mv.flush(ctx)
	}
	return err
}
