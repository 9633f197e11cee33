package relay

import (
	"context"
	"log/slog"
	"time"

	"eaimq/internal/claim"
	"eaimq/internal/fail"
	"eaimq/internal/partner"
	"eaimq/internal/store"
)

// Riding out a dedup store that is unavailable (Config.StoreWait), as the
// relay rides out a broker that is: a PostgreSQL server that restarts or
// fails over, an SQLite file system that fills and is freed again. Without
// its record no claim can be acked, so while the store does not answer:
//
//   - no call starts, and the consumer stops consuming (session.go's
//     holdBack): what the broker had sent goes back to claim.in, and so
//     does each delivery whose Begin failed, or whose outcome the partner
//     has not acted on (a 503, a 422: its next copy is called again, which
//     changes nothing at the partner);
//   - an answer the world has acted on already, a 201 (the partner has the
//     claim) or a delayed copy the broker confirmed, is kept unacked, and
//     its record is written again once the store answers: given back, its
//     next copy would reach the partner again;
//   - one goroutine probes the store (Store.Ping) with backoff; /readyz
//     answers 503 with the reason, and the summary says how long.
//
// Nothing is acked without its record, and nothing is dead-lettered
// because of the store. The run ends (exit 74) only for a failure waiting
// cannot fix (store.Transient says which), after StoreWait without an
// answer, or when the store is still unavailable at the end of the run.

// newStoreGate is the gate that holds the relay back while the store is
// unavailable.
func (r *relay) newStoreGate() *gate {
	g := newGate(func(ctx context.Context) error { return r.store.Ping(ctx) })
	r.abandon = make(chan struct{})
	g.limit = r.cfg.StoreWait
	g.giveUp = func(why string) {
		close(r.abandon)
		r.stop(fail.Errorf(fail.IO, "dedup store %s: unavailable for %s, the longest --store-wait allows: %s", r.store.Path(), r.cfg.StoreWait, why))
	}
	g.opened = func(d time.Duration) {
		r.cfg.Log.Info("the dedup store answers again: resuming", "store", r.store.Path(), "unavailable", d.Round(time.Millisecond).String())
	}
	return g
}

// storeUnavailable reports whether err is a store failure the relay waits
// out, and then holds it back (the first one says so in the log).
func (r *relay) storeUnavailable(err error) bool {
	if r.cfg.StoreWait <= 0 || !store.Transient(err) {
		return false
	}
	if r.storeDown.close(r.hard, err.Error()) {
		r.cfg.Log.Warn("the dedup store is unavailable: no call starts, claims go back to claim.in, and answers in hand wait for their record; probing it",
			"store", r.store.Path(), "err", err, "gives_up_after", r.cfg.StoreWait.String())
	}
	return true
}

func (r *relay) storeIsDown() bool {
	down, _ := r.storeDown.isDown()
	return down
}

// giveBack puts d back in claim.in at once (nack with requeue): another
// consumer, or this one once the store answers, takes it from there.
func (r *relay) giveBack(d *delivery) {
	d.Nack(false, true /* requeue */)
}

// finishHeld writes att's record, waiting out the store as long as the
// relay does (storeUnavailable) for an answer claim.HeldForRecord keeps: until
// the store answers, or the relay stops waiting (a second signal, the
// limit, or --http-timeout after the end of the run).
func (r *relay) finishHeld(soft context.Context, d *delivery, att claim.Attempt) (claim.Outcome, error) {
	for {
		recorded, err := r.store.Finish(context.WithoutCancel(r.hard), d.id, att)
		if err == nil || !claim.HeldForRecord(att) || !r.storeUnavailable(err) || !r.waitForStore(soft) {
			return recorded, err
		}
	}
}

// waitForStore waits for the store to answer; false when the relay stops
// waiting first.
func (r *relay) waitForStore(soft context.Context) bool {
	open := r.storeDown.opens()
	select {
	case <-open:
		return true
	case <-r.hard.Done():
		return false
	case <-r.abandon:
		return false
	case <-soft.Done():
	}
	// The run is over: the drain waits for this claim as for a call.
	t := time.NewTimer(r.cfg.HTTPTimeout)
	defer t.Stop()
	select {
	case <-open:
		return true
	case <-r.hard.Done():
	case <-r.abandon:
	case <-t.C:
	}
	return false
}

// recordFailed is what becomes of d when att's record could not be
// written: the run ends on a failure waiting cannot fix (storeFailed);
// otherwise d goes back to claim.in, its record not written (an answer
// held for its record only when the relay stopped waiting for the store).
func (r *relay) recordFailed(d *delivery, att claim.Attempt, err error) {
	if !r.storeUnavailable(err) {
		r.storeFailed(d.lg, err)
		return
	}
	r.stats.ackErrors.Add(1)
	if claim.HeldForRecord(att) {
		d.lg.log(slog.LevelWarn, "claim NOT recorded: the dedup store did not answer in time; it goes back to claim.in, and its next copy reaches the partner again",
			att.Outcome, att.Detail, partner.Answer{Status: att.Status}, "err", err)
	}
	r.giveBack(d)
}
