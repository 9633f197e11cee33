package dlq

import (
	"context"
	"fmt"
	"slices"
	"time"

	"eaimq/internal/fail"
	"eaimq/internal/store/deadletter"
)

// DefaultReplayLease is how long a row stays replaying before replay
// -force may take it again: a live replay marks its rows replayed within
// the broker's confirm timeout (10 s) of claiming them, so a row
// replaying for longer was left so by a replay that died between its
// claim and its mark.
const DefaultReplayLease = time.Minute

// flushRows is flush over ingested rows, a replay's: the original is a
// row, and its state, not an ack, settles it. The order:
//
//  1. Claim: one UPDATE moves the batch's rows from dead to replaying and
//     returns the ones it moved, before anything is published. Two
//     replays of one row (the CLI and the page, two pages) both try; the
//     database lets one of them find it dead, and only that one sends
//     it. A row already replayed is not dead either: a second replay of
//     it sends nothing.
//  2. Publish the claimed rows' copies with confirm and mandatory.
//  3. Mark the confirmed rows replayed (who, through what, when), only
//     after the confirm: marked first, a crash before the publish would
//     lose the claim with its dead letter marked replayed. A copy the
//     broker returned or nacked is not out: its row goes back to dead.
//
// A crash between 2 and 3 leaves the copy published and its row
// replaying. Nothing replays it again by itself; replay -force takes it
// once it has been replaying for longer than the lease, and then sends
// it a second time, which the consumer's dedup record absorbs (the
// partner is called once). That is the one duplicate this allows.
func (mv *mover) flushRows(ctx context.Context) error {
	if mv.hooks.BeforeClaim != nil {
		mv.hooks.BeforeClaim()
	}
	now := time.Now().UTC()
	seqs := make([]int64, len(mv.batch))
	for i, m := range mv.batch {
		seqs[i] = m.row.Seq
	}
	claimed, err := mv.rows.ChangeDeadLetters(ctx, deadletter.Change{Seqs: seqs, From: []deadletter.State{deadletter.StateDead},
		To: deadletter.StateReplaying, By: mv.actor.Who, Via: mv.actor.Via, At: now, StaleBefore: mv.stale})
	if err != nil {
		return fail.Errorf(fail.IO, "claim %d row(s) for the replay in the store: %w; nothing of them was published", len(seqs), err)
	}
	var mine []*dead
	for _, m := range mv.batch {
		if slices.Contains(claimed, m.row.Seq) {
			mine = append(mine, m)
		} else {
			mv.taken(m)
		}
	}
	mv.batch = mv.batch[:0]
	byTag := make(map[uint64]*dead, len(mine))
	for _, m := range mine {
		tag, err := mv.p.Publish(ctx, mv.to.exchange, mv.to.key, mv.copyOf(m))
		if err != nil {
			return fail.New(fail.Unavailable, fmt.Errorf("publish copy of %s to %s: %w; its row and those after it in the batch stay replaying "+
				"(dlq replay -force takes them again after %s; that may send one twice, which the consumer's dedup absorbs)",
				field(m.Key), mv.to.name, err, DefaultReplayLease))
		}
		byTag[tag] = m
	}
	var ok, back []*dead
	for range mine {
		out, err := mv.p.Await()
		if err != nil {
			// Outcome unknown: the rows stay replaying, as after a crash.
			return fail.New(fail.TempFail, fmt.Errorf("%w; the rows of this batch stay replaying (dlq replay -force takes them again after %s)",
				err, DefaultReplayLease))
		}
		m := byTag[out.Tag]
		switch {
		case out.Acked:
			ok = append(ok, m)
		case out.Returned != "":
			back = append(back, m)
			mv.refuses++
			mv.refused(m.Key, fmt.Sprintf("%s returned the copy (%s)%s", mv.to.name, field(out.Returned), mv.to.onReturn))
		default:
			back = append(back, m)
			mv.refuses++
			mv.refused(m.Key, fmt.Sprintf("the broker nacked the copy for %s (full, or refusing)%s", mv.to.name, mv.to.onNack))
		}
	}
	if len(back) > 0 {
		// Not out: dead again, to be replayed once the cause is fixed.
		if _, err := mv.rows.ChangeDeadLetters(ctx, deadletter.Change{Seqs: seqsOf(back), From: []deadletter.State{deadletter.StateReplaying},
			To: deadletter.StateDead, By: mv.actor.Who, Via: mv.actor.Via, At: time.Now().UTC()}); err != nil {
			return fail.Errorf(fail.IO, "give %d refused row(s) back to dead in the store: %w; they stay replaying", len(back), err)
		}
	}
	if mv.hooks.AfterConfirm != nil {
		if err := mv.hooks.AfterConfirm(); err != nil {
			return err
		}
	}
	if len(ok) > 0 {
		if _, err := mv.rows.ChangeDeadLetters(ctx, deadletter.Change{Seqs: seqsOf(ok), From: []deadletter.State{deadletter.StateReplaying},
			To: deadletter.StateReplayed, By: mv.actor.Who, Via: mv.actor.Via, At: time.Now().UTC()}); err != nil {
			return fail.Errorf(fail.IO, "mark %d confirmed replay(s) replayed in the store: %w; their copies are out and the rows stay replaying "+
				"(do not -force them: the claims are on their way)", len(ok), err)
		}
	}
	for _, m := range ok {
		mv.n++
		mv.moved(m.Key)
	}
	if mv.flushed != nil {
		mv.flushed(mv.n)
	}
	return nil
}

func seqsOf(ms []*dead) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.row.Seq
	}
	return out
}

// changeRows moves the selected ingested rows of b from one state to
// another (c's From and To; To "": deleted), a batch of moveWindow in one
// transaction each: purge (dead to purged, the archive) and restore
// (purged to dead). No message moves, so there is nothing to confirm: the
// UPDATE is the whole act, and its condition on the state makes a row
// that another operator changed first (replayed, purged) stay as it is.
// done is told of each row changed, taken of each that was not.
func changeRows(ctx context.Context, b *Browser, sel selection, c deadletter.Change, done func(key string), taken func(key string)) (n int, err error) {
	var batch []*dead
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		c.Seqs, c.At = seqsOf(batch), time.Now().UTC()
		changed, err := b.ingested.ChangeDeadLetters(ctx, c)
		if err != nil {
			return fail.Errorf(fail.IO, "change %d row(s) in the store %s: %w; none of them changed", len(batch), b.store.Path(), err)
		}
		for _, m := range batch {
			if slices.Contains(changed, m.row.Seq) {
				n++
				done(m.Key)
			} else {
				taken(m.Key)
			}
		}
		batch = batch[:0]
		return nil
	}
	take := func(m *dead) error {
		batch = append(batch, m)
		if len(batch) >= moveWindow {
			return flush()
		}
		return nil
	}
	err = b.walk(ctx, sel.limit, func(m *dead) (bool, error) {
		if !sel.selects(m) {
			return true, nil
		}
		return true, take(m)
	})
	for _, m := range sel.after() {
		if err == nil {
			err = take(m)
		}
	}
	if err == nil {
		err = flush()
	}
	return n, err
}
