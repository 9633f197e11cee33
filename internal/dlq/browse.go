package dlq

import (
	"context"
	"fmt"
	"io"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/fail"
	"eaimq/internal/store"
	"eaimq/internal/store/deadletter"
	"eaimq/internal/topo"
)

// Browser walks claim.dead without consuming it.
//
// AMQP 0-9-1 has no "peek": browsing takes each message unacked and gives
// it back. Nothing can be lost this way: a message taken unacked stays the
// broker's until it is acked, and every message not acked (all of them,
// for list and show) returns to claim.dead when the channel closes, or
// when the process dies, since the broker requeues a closed channel's
// unacked messages. What changes: the returned messages carry
// redelivered=true, and a classic queue puts them back in their original
// order ahead of anything published meanwhile.
//
// The messages come through a source (basic.consume, a window at a time),
// and this process keeps at most a window of them: each is printed (or
// acted on) and dropped, only its delivery tag living on in the broker.
// The broker holds the unacked set until the walk ends (docs/figures.md
// has what that costs it).
type Browser struct {
	conn  *amqp.Connection // replay publishes its copies on another channel of it
	ch    *amqp.Channel
	queue string      // the queue it walks: claim.dead, or the archive (NewArchiveBrowser)
	store store.Store // nil when there is none

	// MaxHeld bounds how many dead letters a walk holds unacked (0: no
	// bound; -max-held). The broker keeps each one it holds for the walk
	// in its memory until the walk ends, and past its watermark it blocks
	// every publisher on the node (docs/figures.md).
	MaxHeld int

	// Set by walk: what claim.dead held when the walk started, how many
	// it took, and the -limit it stopped at (0: none).
	total, looked, limit int
	// bounded: the walk stopped at MaxHeld, with dead letters beyond.
	bounded bool
	// deliveries is the largest x-delivery-count the walk saw: a quorum
	// claim.dead counts every look (quorumWarning).
	deliveries int64
	// version is the broker's, from the connection: RabbitMQ 4 drops a
	// quorum queue's message past its delivery limit, 20 by default.
	version string
	held    held // what the walks took and did not settle (Close)
	closed  bool

	// ingested, when set, is the source instead of the queue: the rows
	// dlq ingest wrote (NewIngestedBrowser); narrow is what a command
	// asks of them, so that an index serves it.
	ingested store.DeadLetters
	narrow   deadletter.Query
	// states are the rows' states it reads: deadletter.Live, or the
	// archive's purged ones (NewIngestedArchiveBrowser).
	states []deadletter.State
	// MoreBound (0: none) bounds the count of the ingested rows a -limit
	// left out: past it, the count is a lower bound and Walked.Over says
	// so (list sets it; the exact count costs a count of every row).
	MoreBound int
	over      bool
	// Lean says the walk's callers read only the model's fields, not the
	// message (Delivery): the ingested rows are then read without their
	// properties and bodies (deadOfRowLean), unless a filter reads them
	// (-guid, -text, IDs that may be a message_id). list sets it.
	Lean bool
}

// NewBrowser opens a channel on conn to walk claim.dead, reading what the
// consumer recorded from st (nil: no store). Closing the channel (Close),
// the connection, or dying returns every message not acked to claim.dead.
func NewBrowser(conn *amqp.Connection, st store.Store) (*Browser, error) {
	return newBrowser(conn, st, topo.DeadQueue)
}

// NewArchiveBrowser is NewBrowser for claim.dead.archive, the purged dead
// letters (list -archive, show -archive, restore), walked the same way.
func NewArchiveBrowser(conn *amqp.Connection, st store.Store) (*Browser, error) {
	return newBrowser(conn, st, topo.ArchiveQueue)
}

func newBrowser(conn *amqp.Connection, st store.Store, queue string) (*Browser, error) {
	ch, err := conn.Channel()
	if err == nil {
		err = topo.RequireQueue(ch, queue)
	}
	if err != nil {
		return nil, fail.Broker(err, topo.ErrMissing)
	}
	v, _ := conn.Properties["version"].(string)
	return &Browser{conn: conn, ch: ch, queue: queue, store: st, version: v}, nil
}

// IngestedSource names the ingested dead letters in messages, where
// claim.dead stands for the queue.
const IngestedSource = "the store's ingested dead letters"

// NewIngestedBrowser reads the dead letters dlq ingest wrote into st
// (the same model as NewBrowser's: list and show work alike on both);
// conn is for what claim.dead still holds (Uningested).
func NewIngestedBrowser(conn *amqp.Connection, st store.Store) (*Browser, error) {
	dl, ok := store.DeadLettersOf(st)
	if !ok {
		return nil, fail.Errorf(fail.IO, "the store %s has no table of dead letters", st.Path())
	}
	b, err := newBrowser(conn, st, topo.DeadQueue)
	if err != nil {
		return nil, err
	}
	b.queue, b.ingested, b.states = IngestedSource, dl, deadletter.Live
	return b, nil
}

// IngestedArchive names the purged ingested dead letters in messages.
const IngestedArchive = "the store's archive of purged dead letters"

// NewIngestedArchiveBrowser is NewIngestedBrowser for the purged rows:
// the archive where dead letters are ingested (list -archive, show
// -archive, restore).
func NewIngestedArchiveBrowser(conn *amqp.Connection, st store.Store) (*Browser, error) {
	b, err := NewIngestedBrowser(conn, st)
	if err != nil {
		return nil, err
	}
	b.queue, b.states = IngestedArchive, []deadletter.State{deadletter.StatePurged}
	return b, nil
}

// Ingested says whether dlq ingest wrote dead letters into st: the last
// row's seq, 0 when there is none (a store without the table, or every
// row pruned). One lookup of the primary key's end, where a count reads
// every row: every command and page asks it first.
func Ingested(ctx context.Context, st store.Store) (int64, error) {
	dl, ok := store.DeadLettersOf(st)
	if !ok || st == nil {
		return 0, nil
	}
	return dl.LastDeadLetterSeq(ctx)
}

// Uningested writes the one line that says what claim.dead still holds
// that was not ingested, when b read the ingested dead letters and the
// queue holds some: they are not mixed in.
func (b *Browser) Uningested(w io.Writer) {
	if b.ingested == nil {
		return
	}
	q, err := b.ch.QueueDeclarePassive(topo.DeadQueue, true, false, false, false, nil)
	if err != nil {
		fmt.Fprintf(w, "dlq: warning: could not count what %s still holds: %v\n", topo.DeadQueue, err)
		return
	}
	if q.Messages == 0 {
		return
	}
	fmt.Fprintf(w, "dlq: %s still holds %d dead letter(s) not ingested yet, not shown here (dlq ingest takes them; -queue walks them there)\n",
		topo.DeadQueue, q.Messages)
}

// narrowTo tells an ingested source what c selects: its IDs and filters
// become the query's, so that an index finds them. The filter still
// decides, as for the queue.
func (b *Browser) narrowTo(c Config) {
	q := deadletter.Query{IDs: c.IDs, Status: c.Status, States: b.states, GUID: c.GUID, Text: c.Text}
	if c.ByReason {
		q.Reason = c.Reason.String()
	}
	if c.CrashLoop {
		q.BrokerReason = deliveryLimit
	}
	b.narrow = q
}

// archive says whether b walks the archive.
func (b *Browser) archive() bool { return b.queue == topo.ArchiveQueue || b.queue == IngestedArchive }

// walk calls fn for each message claim.dead held when it started, at most
// limit (0: all). fn returns false to stop.
//
// The bound is what keeps one run from meeting its own work again: a
// claim replayed while a consumer runs can be rejected and dead-lettered
// again within milliseconds, and it lands behind every message that was
// there before. Walking "until claim.dead has nothing ready" would take it
// again, and replay it again, for as long as the consumer keeps up.
//
// The messages are described a batch at a time (what the source has in
// hand, at most a window): one read of the store for the batch's records.
func (b *Browser) walk(ctx context.Context, limit int, fn func(*dead) (bool, error)) error {
	if b.ingested != nil {
		return b.walkRows(ctx, limit, fn)
	}
	q, err := b.ch.QueueDeclarePassive(b.queue, true, false, false, false, nil)
	if err != nil {
		return fail.New(fail.Unavailable, fmt.Errorf("count %s: %w", b.queue, err))
	}
	b.total, b.limit = q.Messages, limit
	n := q.Messages
	if limit > 0 && limit < n {
		n = limit
	}
	src := &source{ch: b.ch, queue: b.queue, held: &b.held, maxHeld: b.MaxHeld}
	for b.looked < n {
		batch, err := src.next(ctx, min(n-b.looked, maxWindow))
		if err != nil {
			if ctx.Err() != nil {
				return fail.Errorf(fail.Interrupted, "interrupted after %d dead letter(s); the rest stay in %s: %w", b.looked, b.queue, ctx.Err())
			}
			return err
		}
		if len(batch) == 0 {
			// At the bound, or someone else took the rest.
			b.bounded = src.full()
			return nil
		}
		ms, err := b.describe(ctx, batch)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if ctx.Err() != nil {
				return fail.Errorf(fail.Interrupted, "interrupted after %d dead letter(s); the rest stay in %s: %w", b.looked, b.queue, ctx.Err())
			}
			b.looked++
			more, err := fn(m)
			if err != nil || !more {
				return err
			}
		}
	}
	return nil
}

// wholeRow reads the row a lean read (deadletter.Query.Lean) read
// without its properties and body, with them; the lean row itself when
// it is gone meanwhile (purge -no-archive).
func (b *Browser) wholeRow(ctx context.Context, r deadletter.Row) (deadletter.Row, error) {
	rows, err := b.ingested.DeadLetters(ctx, deadletter.Query{After: r.Seq - 1, Through: r.Seq, Limit: 1})
	if err != nil {
		return r, fail.Errorf(fail.IO, "read the ingested dead letters from the store %s: %w", b.store.Path(), err)
	}
	if len(rows) == 1 && rows[0].Seq == r.Seq {
		return rows[0], nil
	}
	return r, nil
}

// unlooked is how many dead letters -limit or -max-held left out.
func (b *Browser) unlooked() int {
	if !b.bounded && (b.limit == 0 || b.looked < b.limit) {
		return 0
	}
	return max(0, b.total-b.looked)
}

// cut names the flag that cut the walk short.
func (b *Browser) cut() string {
	if b.bounded {
		return fmt.Sprintf("-max-held %d", b.MaxHeld)
	}
	return fmt.Sprintf("-limit %d", b.limit)
}

// beyond qualifies "not found" when -limit or -max-held cut the walk short.
func (b *Browser) beyond() string {
	if n := b.unlooked(); n > 0 {
		return fmt.Sprintf(" among the first %d (%s; %d more not looked at)", b.looked, b.cut(), n)
	}
	return ""
}

// BoundNote writes the one line that says a walk stopped at -max-held:
// how many it looked at, how many are beyond, and how to see them.
// Nothing when no walk stopped there. dlq writes it on stderr when a
// command ends, so that it is the last thing people read.
func (b *Browser) BoundNote(w io.Writer) {
	if !b.bounded {
		return
	}
	fmt.Fprintf(w, "dlq: stopped at -max-held %d: looked at %d dead letter(s), %d more in %s beyond; "+
		"-max-held 0 looks at all (the broker holds each until dlq ends: docs/figures.md), or dlq ingest takes them into the store\n",
		b.MaxHeld, b.looked, b.unlooked(), b.queue)
}

// rowsPage is how many ingested rows one query reads.
const rowsPage = 500

// leanRowsPage is rowsPage for rows read lean (deadletter.Query.Lean):
// without their bodies, 2,000 of them hold less than 500 whole rows of
// 1 KiB bodies, and a whole list's million rows are 500 queries, not
// 2,000 (each one prepared and planned: 0.6 of 12 s of CPU, pprof).
const leanRowsPage = 2000

// walkRows is walk over the ingested rows: in pages of rowsPage, keyset
// by seq (a page costs the same on the millionth row as on the first).
//
// It reads the rows there were when it started (seq through the last
// one then), as the queue's walk reads what claim.dead held: a bulk
// replay does not sweep in the claims that fail again after their replay
// and are ingested meanwhile.
func (b *Browser) walkRows(ctx context.Context, limit int, fn func(*dead) (bool, error)) error {
	if len(b.narrow.States) == 0 {
		b.narrow.States = b.states
	}
	if b.narrow.Through == 0 {
		last, err := b.ingested.LastDeadLetterSeq(ctx)
		if err != nil {
			return fail.Errorf(fail.IO, "read the ingested dead letters from the store %s: %w", b.store.Path(), err)
		}
		if last == 0 {
			return nil // none
		}
		b.narrow.Through = last
	}
	q := b.narrow
	q.Lean = b.Lean && len(q.IDs) == 0 && q.GUID == "" && q.Text == ""
	b.limit = limit
	var last int64 // the seq of the last row looked at
	var lt leanTables
	page := rowsPage
	if q.Lean {
		page = leanRowsPage
	}
	for {
		q.Limit = page
		if limit > 0 {
			q.Limit = min(page, limit-b.looked)
		}
		if q.Limit <= 0 {
			break
		}
		rows, err := b.ingested.DeadLetters(ctx, q)
		if err != nil {
			return fail.Errorf(fail.IO, "read the ingested dead letters from the store %s: %w", b.store.Path(), err)
		}
		for i, r := range rows {
			if ctx.Err() != nil {
				return fail.Errorf(fail.Interrupted, "interrupted after %d dead letter(s): %w", b.looked, ctx.Err())
			}
			b.looked++
			last = r.Seq
			var m *dead
			if q.Lean {
				m = deadOfRowLean(&rows[i], &lt)
			}
			if m == nil {
				if q.Lean {
					// Rare: a claim_id that may be PostgreSQL's
					// stand-in for what the body says, or headers
					// that do not read (deadOfRow decides).
					if r, err = b.wholeRow(ctx, r); err != nil {
						return err
					}
				}
				m = deadOfRow(r)
			}
			more, err := fn(m)
			if err != nil || !more {
				return err
			}
		}
		if len(rows) < q.Limit {
			break
		}
		q.After = rows[len(rows)-1].Seq
	}
	b.total = b.looked // all of them, unless -limit cut the walk short
	if limit > 0 && b.looked >= limit {
		// Only -limit needs the total: how many it left out.
		rest := b.narrow
		if b.MoreBound > 0 {
			// Those after the last one looked at, counted up to one past
			// the bound: the count reads at most that many index entries,
			// where all of them were a scan of the million (most of a
			// `dlq -limit 50 list`'s time).
			rest.After, rest.Limit = last, b.MoreBound+1
		}
		n, err := b.ingested.CountDeadLetters(ctx, rest)
		if err != nil {
			return fail.Errorf(fail.IO, "count the ingested dead letters in the store %s: %w", b.store.Path(), err)
		}
		b.total = int(n)
		if b.MoreBound > 0 {
			b.over = n > int64(b.MoreBound)
			b.total = b.looked + min(int(n), b.MoreBound)
		}
	}
	return nil
}
