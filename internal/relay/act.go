package relay

import (
	"errors"
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/claim"
	"eaimq/internal/fail"
	"eaimq/internal/partner"
	"eaimq/internal/retry"
)

// act acks, requeues, delays or dead-letters d as out says and logs the
// one line of its outcome.
func (r *relay) act(d *delivery, out claim.Outcome, detail string, a partner.Answer, wait later) {
	if hook := r.cfg.Hooks.BeforeAct; hook != nil {
		hook(d.Delivery, out)
	}
	var err error
	var extra []any
	switch out.Action {
	case claim.Ack:
		err = d.Ack(false)
	case claim.Requeue:
		err = d.Nack(false, true /* requeue */)
	case claim.Delay:
		// The copy went first, confirmed (carryOut), then the record, and
		// only now the ack: acked first, a crash in between would lose the
		// claim; this way it leaves two copies at worst, and the record
		// absorbs the second.
		extra = delayExtra(wait)
		err = d.Ack(false)
	case claim.DeadLetter:
		if d.s.over() {
			// Its session is over: the broker gave d back with the
			// connection, and no reject can reach it now. Said as for an
			// ack that failed, not as a route that is missing.
			err = amqp.ErrClosed
			break
		}
		// The broker drops a rejected message whose dead-letter route is
		// gone, and says nothing. Check the route first; if it is gone,
		// reject nothing and stop: the claim stays in claim.in, its
		// decision on record.
		if !r.routeReady(d, out, detail, a) {
			return
		}
		err = d.Reject(false /* requeue: the queue's DLX takes it */)
	}
	if err != nil {
		r.stats.ackErrors.Add(1)
		d.lg.log(slog.LevelWarn, "claim recorded but not acked: the connection is gone; the redelivered copy will meet the record",
			out, detail, a, "err", err)
		return
	}
	r.stats.count(out)
	r.metrics.Settled(out)
	level := slog.LevelInfo
	switch out.Action {
	case claim.DeadLetter:
		level = slog.LevelWarn
	case claim.Delay:
		r.metrics.RetryScheduled(retry.QueueName(wait.delay))
	}
	d.lg.log(level, "claim", out, detail, a, extra...)
}

// delayExtra is a delayed retry's fields in the claim's log line.
func delayExtra(wait later) []any {
	return []any{"retry", wait.done + 1, "queue", retry.QueueName(wait.delay), "retry_in", wait.delay}
}

// notDelayed leaves d in claim.in when its delayed copy could not be sent:
// unacked, with the run ending, if the delay queue is gone; requeued
// otherwise.
func (r *relay) notDelayed(d *delivery, att claim.Attempt, a partner.Answer, wait later, err error) {
	r.stats.ackErrors.Add(1)
	extra := append(delayExtra(wait), "err", err)
	if errors.Is(err, errDelayQueueMissing) || errors.Is(err, errDelayRefused) {
		d.lg.log(slog.LevelError, "claim NOT delayed: left in claim.in", att.Outcome, att.Detail, a, extra...)
		r.stop(r.delayMissing(err))
		return
	}
	// Whether the broker has the copy is unknown: requeue the original
	// rather than leave the claim to chance. If the copy did arrive, one
	// of the two meets the other's record.
	d.lg.log(slog.LevelWarn, "claim NOT delayed: requeued instead", att.Outcome, att.Detail, a, extra...)
	d.Nack(false, true /* requeue */)
}

// routeReady checks the dead-letter route before a reject (deadRoute), on
// the connection of d's session, whose channel rejects it. When the check
// fails, d stays in claim.in, unacked, and a route that is gone ends the
// run.
func (r *relay) routeReady(d *delivery, out claim.Outcome, detail string, a partner.Answer) bool {
	err := d.s.route.verify()
	if err == nil {
		return true
	}
	r.stats.ackErrors.Add(1)
	d.lg.log(slog.LevelError, "claim NOT dead-lettered: left in claim.in", out, detail, a, "err", err)
	if errors.Is(err, errRouteMissing) {
		r.stop(routeMissing(err))
	}
	return false
}

// storeFailed leaves the claim unacked and ends the run: without its
// record, no claim can be acked safely.
func (r *relay) storeFailed(lg claimLog, err error) {
	r.stats.ackErrors.Add(1)
	r.storeBroken.Store(true)
	lg.Error("dedup store failed: leaving the claim unacked and stopping", "err", err)
	r.stop(fail.New(fail.IO, fmt.Errorf("dedup store %s: %w", r.store.Path(), err)))
}
