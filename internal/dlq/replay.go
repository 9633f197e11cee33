package dlq

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/fail"
	"eaimq/internal/partner"
	"eaimq/internal/store/deadletter"
	"eaimq/internal/topo"
)

// rules are replay's limits: -force and -max-replays, and an edited body
// (dlq serve) that replaces the dead letter's.
type rules struct {
	force      bool
	maxReplays int
	edit       *edit
	hooks      Hooks
	// Over ingested rows: who replays (the rows' state_by and state_via),
	// how long a row left replaying waits for -force (0:
	// DefaultReplayLease), the pace (-rate, 0: none), and progress, told
	// after each batch how many are replayed so far (nil: not told).
	actor    Actor
	lease    time.Duration
	rate     float64
	progress func(n int)
}

// edit is a body a person fixed, already checked as publish checks a claim.
type edit struct {
	body  []byte
	guid  string // its guid: the message_id of a copy whose dead letter had none
	actor Actor  // who edited it and through what, for the header
	// previous is the sha256 of the body that was edited ("": not
	// known): a dead letter whose body is another now is not replaced.
	previous string
}

// copyID is the message_id of a dead letter's copy: its own, or for one
// that had none, the edited body's guid (as publish sets it).
func copyID(messageID string, e *edit) string {
	if messageID == "" && e != nil {
		return e.guid
	}
	return messageID
}

// Replay is the command: replayDead, each note printed as it comes (a
// refusal on stderr), then the count, and the audit entry. A refusal or a
// named ID not in claim.dead is a failure.
func Replay(ctx context.Context, b *Browser, c Config, stdout, stderr io.Writer) error {
	rec, err := begin(ctx, c.Audit, c.Actor, "replay", target(c), stderr)
	if err != nil {
		return err
	}
	f := newFilter(c)
	b.narrowTo(c)
	r := rules{force: c.Force, maxReplays: c.MaxReplays, hooks: c.Hooks, actor: c.Actor, lease: c.ReplayLease, rate: c.Rate,
		progress: progress(stderr, "replayed", time.Second)}
	t, err := replayDead(ctx, b, f.selection(), r, func(n note) {
		rec.note(n)
		if n.failed() {
			fmt.Fprintf(stderr, "dlq: %s\n", n.text())
		} else {
			fmt.Fprintln(stdout, n.text())
		}
	})
	fmt.Fprintf(stdout, "dlq: %s\n", t)
	QuorumWarning(b, stderr)
	if err != nil {
		return rec.end(ctx, err)
	}
	missing := f.missing(stderr, b)
	f.unnamedTo(rec, b)
	if err := rec.end(ctx, nil); err != nil {
		return err
	}
	if t.refused+t.capped+missing > 0 {
		return fail.Errorf(fail.Failed, "%d over -max-replays, %d refused by the broker, %d named ID(s) naming no single dead letter", t.capped, t.refused, missing)
	}
	return nil
}

// replayDead publishes a copy of each selected dead letter to eai.claim
// and acks the dead copy only after the broker confirmed and routed the
// copy. The order is the whole point: ack first and a crash before the
// publish loses the claim; publish first and a crash before the ack leaves
// a duplicate, which the consumer's dedup record absorbs.
//
// It is the one replay of this program: dlq replay and every retry of dlq
// serve (one, a group, an edited claim) go through it, so the page is
// exactly as safe as the command. tell is called for each dead letter
// acted on or skipped.
func replayDead(ctx context.Context, b *Browser, sel selection, r rules, tell func(note)) (tally, error) {
	ch, err := b.conn.Channel()
	if err == nil {
		err = topo.RequireExchange(ch, topo.Exchange)
	}
	if err != nil {
		return tally{}, fail.Broker(err, topo.ErrMissing)
	}
	ch.Close()
	mv, closeMv, err := newMover(b, claimDest, func(m *dead) amqp.Publishing { return copyOf(m, r.edit) })
	if err != nil {
		return tally{}, err
	}
	defer closeMv()
	rp := &replayer{mv: mv, rules: r, tell: tell, sent: map[string]bool{}}
	mv.hooks, mv.actor, mv.flushed = r.hooks, r.actor, r.progress
	mv.paced(r.rate)
	mv.taken = func(m *dead) { rp.report(note{noteTaken, m.Key, ""}) }
	if r.force {
		mv.stale = time.Now().Add(-r.leaseOr())
	}
	mv.moved = func(key string) { rp.report(note{noteReplayed, key, ""}) }
	mv.refused = func(key, why string) { rp.report(note{noteRefused, key, why}) }
	err = moveSelected(ctx, b, sel, mv, rp.take)
	return rp.tally, err
}

// replayer is one replay under way: which dead letters it takes, and a
// mover to eai.claim that publishes them.
type replayer struct {
	mv *mover
	rules
	tally
	tell func(note)
	sent map[string]bool // the keys replayed (or being replayed) in this run
}

func (rp *replayer) report(n note) { rp.add(n); rp.tell(n) }

// take queues m for a replay, or reports why it is skipped; a full batch
// is flushed.
func (rp *replayer) take(ctx context.Context, m *dead) error {
	switch {
	case rp.sent[m.Key]:
		// A second copy of a claim replayed in this run (published
		// twice, or dead-lettered again already): one try per run.
		rp.report(note{noteAgain, m.Key, ""})
		return nil
	case m.row != nil && m.row.State == deadletter.StateReplaying && (!rp.force || time.Since(m.row.StateAt) < rp.leaseOr()):
		// Being replayed now, or left so by a replay that died between
		// its publish and its mark: its copy may be out already.
		rp.report(note{noteReplaying, m.Key, replayingDetail(m.row, rp.leaseOr())})
		return nil
	case m.Known && m.Rec.Delivered() && !rp.force:
		rp.report(note{noteDelivered, m.Key, ""})
		return nil
	case rp.edit != nil && rp.edit.previous != "" && sha256hex(m.d.Body) != rp.edit.previous:
		rp.report(note{noteChanged, m.Key, ""})
		return nil
	case m.Replays >= int64(rp.maxReplays) && !rp.force && rp.edit == nil:
		// An edited claim is the fix this limit asks for.
		rp.report(note{noteCapped, m.Key, fmt.Sprintf("replayed %d times already (-max-replays %d)", m.Replays, rp.maxReplays)})
		return nil
	}
	rp.sent[m.Key] = true
	return rp.mv.take(ctx, m)
}

func (r rules) leaseOr() time.Duration {
	if r.lease > 0 {
		return r.lease
	}
	return DefaultReplayLease
}

// replayingDetail says why a row left replaying is skipped, and how to
// send it again.
func replayingDetail(r *deadletter.Row, lease time.Duration) string {
	return fmt.Sprintf("replaying since %s by %s (%s): its copy may be out already. A replay that died between its publish and "+
		"its mark leaves it so; dlq replay -force takes it after %s replaying, and may send it a second time (the consumer's dedup absorbs that)",
		r.StateAt.UTC().Format(time.DateTime), orDash(r.StateBy), orDash(r.StateVia), lease)
}

// progress is a bulk action's progress on w: a line at most every
// period, how many are done and at what rate.
func progress(w io.Writer, verb string, period time.Duration) func(n int) {
	start := time.Now()
	last := start
	return func(n int) {
		now := time.Now()
		if now.Sub(last) < period {
			return
		}
		last = now
		fmt.Fprintf(w, "dlq: %d %s so far (%.0f/s)\n", n, verb, float64(n)/now.Sub(start).Seconds())
	}
}

// copyOf is the message to replay: the claim as it was first published
// (or as a person edited it), without the broker's dead-letter headers,
// with the replay count, and for an edit the edit header.
func copyOf(m *dead, e *edit) amqp.Publishing {
	d := m.d
	headers := amqp.Table{}
	for k, v := range d.Headers {
		if k == "x-death" || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") {
			continue
		}
		headers[k] = v
	}
	headers[replayHeader] = m.Replays + 1
	body := d.Body
	id := copyID(d.MessageId, e)
	if e != nil {
		headers[editHeader] = amqp.Table{
			"at":              time.Now().UTC().Truncate(time.Second),
			"by":              e.actor.Who,
			"via":             e.actor.Via,
			"previous_sha256": sha256hex(d.Body),
			partner.EditedKey: partner.EditKey(id, e.body),
		}
		body = e.body
	}
	return amqp.Publishing{
		Headers:       headers,
		ContentType:   d.ContentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     id,
		CorrelationId: d.CorrelationId,
		Timestamp:     d.Timestamp,
		AppId:         d.AppId,
		Body:          body,
	}
}
