package relay

import (
	"context"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/claim"
	"eaimq/internal/claimid"
	"eaimq/internal/partner"
	"eaimq/internal/retry"
	"eaimq/internal/trace"
)

// delivery is one delivery in a worker's hands, with the session it came
// on (which settles it: its Acknowledger is that session's acker) and what
// was read off it.
type delivery struct {
	amqp.Delivery
	s  *session
	id string   // the dedup key
	tp string   // the W3C traceparent to forward, when it carries one
	lg claimLog // its log line
}

// later is a delayed retry's plan: the delay, and the retries before it.
type later struct {
	delay time.Duration
	done  int
}

// handle processes one delivery of session s to its end: ack, requeue or
// dead-letter.
func (r *relay) handle(soft context.Context, s *session, ad amqp.Delivery) {
	r.stats.received.Add(1)
	r.metrics.Received()
	r.metrics.InFlight(1)
	defer r.metrics.InFlight(-1)
	// The dedup key: the message_id, else the body's guid taken byte-exact
	// and exact-case (claimid, the rule publish applies), else a body hash.
	guid, claimID := claimid.Peek(ad.Body)
	d := &delivery{Delivery: ad, s: s, id: claim.Key(ad.MessageId, guid, ad.Body)}
	var traceID string
	d.tp, traceID = trace.From(ad.Headers)
	d.lg = claimLog{r.cfg.Log, d.id, claimID, traceID, d.Redelivered}
	if d.MessageId == "" && guid == "" {
		// Nothing to deduplicate on: processing it could never be made
		// exactly-once, so it goes to the DLQ with the reason on record
		// under a key made from the body.
		r.settle(d, claim.OutNoID, "")
		return
	}
	// A claim whose id or content type cannot be put into an HTTP request
	// as it is would fail the same way every time: a permanent failure of
	// its own, decided before any call and without burning its retry.
	if err := claimid.HeaderValue(d.id); err != nil {
		r.settle(d, claim.OutUnsendable, "message_id as Idempotency-Key: "+err.Error())
		return
	}
	if err := claimid.HeaderValue(d.ContentType); err != nil {
		r.settle(d, claim.OutUnsendable, "content_type: "+err.Error())
		return
	}

	if hook := r.cfg.Hooks.BeforeBegin; hook != nil {
		hook(d.Delivery)
	}
	// Two copies of one claim in this process: the second waits for the
	// first's outcome, then finds the record.
	release, ok := r.flight.acquire(r.hard, d.id)
	if !ok {
		return
	}
	defer release()
	if prior, ok := r.begin(soft, d, claimID); ok {
		r.call(soft, d, prior)
	}
}

// step is the retries behind d (--retry-delays: the delay queues it came
// through, from its headers), 0 for a first try and without delays.
func (r *relay) step(d *delivery) int {
	if r.cfg.Retry == nil {
		return 0
	}
	return retry.Done(d.Headers)
}

// token names d among the copies of its step (retry.Token), "" without
// delays: the store keeps a dead-lettered copy's, so that only that copy
// is rejected again when it comes back (claim.Begin).
func (r *relay) token(d *delivery) string {
	if r.cfg.Retry == nil {
		return ""
	}
	return retry.Token(d.Headers)
}

// begin takes the claim in the store for this holder and returns its
// transient failures on record. It returns false when the delivery needs
// no call: acted on already (delivered or dead-lettered before), or left
// unacked because the run ended or the store failed.
func (r *relay) begin(soft context.Context, d *delivery, claimID string) (prior int, ok bool) {
	for {
		// While the claim system is down (--pause-when-down) no call
		// starts: this delivery waits here unacked, before Begin takes
		// the claim, so that no lease runs out during a long pause.
		// The run may have ended while this copy waited: a new call now
		// would outlive --max-seconds. It stays unacked and goes back to
		// the queue when the channel closes.
		if !r.pause.wait(soft) || soft.Err() != nil {
			return 0, false
		}
		// While the store is unavailable no call starts: the claim goes
		// back to claim.in (store.go).
		if r.storeIsDown() {
			r.giveBack(d)
			return 0, false
		}
		// A delivery whose session has ended is dropped here: no Begin,
		// no call, no settlement. The broker requeued it the moment its
		// channel closed, and its redelivered copy is another worker's now
		// (or will be). Most copies say fresh at step 0, and Begin would
		// take such a one for a claim published again and start its
		// lineage over: with --retry-delays one lost confirm more puts the
		// claim in claim.dead twice, and in the lab's mode it costs a call
		// (docs/model.md, finding 1). Looked at again after each wait
		// above and below: what this copy waits for may be its redelivered
		// copy at work. Left: the channel closing after this look and
		// before Begin. Begin first holds the claim, and the other copy
		// waits for its record; the other's Begin first makes this one
		// wait and look again; so only a whole cycle of the other copy
		// in between does harm (docs/safety.md, crash windows).
		if d.s.over() {
			r.cfg.Log.Info("delivery dropped before its Begin: its channel closed, and the broker has it back for another consumer",
				"message_id", clip(d.id), "redelivered", d.Redelivered, "session", d.s.n)
			return 0, false
		}
		b, err := r.store.Begin(r.hard, d.id, claim.Copy{ClaimID: claimID, Fresh: !d.Redelivered, Step: r.step(d), Token: r.token(d)}, r.lease)
		if err != nil {
			if r.storeUnavailable(err) {
				r.giveBack(d)
			} else {
				r.storeFailed(d.lg, err)
			}
			return 0, false
		}
		switch b.Result {
		case claim.Done:
			// Delivered before (this copy is a redelivery, or the
			// publisher sent it twice): ack without calling the partner.
			r.act(d, claim.OutDuplicate, "", partner.Answer{}, later{})
			return 0, false
		case claim.DeadBefore:
			// Dead-lettered before, and the reject never reached the
			// broker: reject again, with the decision on record, without
			// a call.
			r.act(d, b.Prior, "the decision on record: rejected again without a call", partner.Answer{}, later{})
			return 0, false
		case claim.StepDone:
			// This copy's step was carried out (its delayed copy is in a
			// delay queue, or the claim was dead-lettered after it): the
			// ack was lost with a connection. Acting on it again would
			// fork the claim into two lineages of retries.
			r.act(d, claim.OutSuperseded, "", partner.Answer{}, later{})
			return 0, false
		case claim.Acquired:
			return b.Failures, true
		}
		// Another consumer process is calling the partner with this id
		// right now: wait for its outcome rather than call twice.
		select {
		case <-time.After(200 * time.Millisecond):
		case <-soft.Done():
			return 0, false // stays unacked; the broker gives it back at close
		case <-r.hard.Done():
			return 0, false
		}
	}
}

// call posts the claim to the partner, decides the outcome of its answer,
// records it, then acts on it.
func (r *relay) call(soft context.Context, d *delivery, prior int) {
	r.answered.Add(1)
	a := r.partner.Post(r.hard, d.Body, d.ContentType, partner.Key(d.id, d.Headers), d.tp)
	if a.Err != nil && r.hard.Err() != nil {
		// Forced exit mid-call: the outcome is unknown, so nothing is
		// recorded and nothing acked; the copy goes back to the queue.
		r.answered.Done()
		return
	}
	r.metrics.Call(a.Status, a.Latency)
	r.pause.note(soft, a)
	out := claim.Decide(a.Status, r.cfg.Accept, d.Redelivered, prior)
	r.health.note(out, a) // before the retry plan: what the partner's answer was
	var wait later
	if r.cfg.Retry != nil {
		// --retry-delays replaces the lab's requeue-once rule: the count
		// is the copy's own retries, carried in its headers.
		wait.done = r.step(d)
		prior = wait.done
		out, wait.delay = claim.Delayed(out, r.cfg.Retry.Delays, wait.done, a.RetryAfter)
	}
	if hook := r.cfg.Hooks.AfterAnswer; hook != nil {
		hook(out)
	}
	att := claim.Attempt{At: time.Now(), Redelivered: d.Redelivered, Status: a.Status, Error: a.Excerpt,
		Outcome: out, Detail: out.Describe(a.Status, prior), Latency: a.Latency, Called: true, Token: r.token(d)}
	if !r.carryOut(soft, d, &att, a, wait) {
		return
	}
	// Record first, then ack. If we die between the two, the redelivered
	// copy is acked as a duplicate (or, for a dead letter, rejected again)
	// instead of calling the partner again. The other way round, a crash
	// would lose the record and call twice. The record is written even
	// after a second signal: an answer in hand is the one thing that must
	// not be thrown away.
	commit := time.Now()
	recorded, err := r.finishHeld(soft, d, att)
	r.metrics.Commit(time.Since(commit))
	r.answered.Done()
	if err != nil {
		r.recordFailed(d, att, err)
		return
	}
	if r.hard.Err() != nil {
		return // recorded; the redelivered copy meets the record
	}
	detail := att.Detail
	if recorded != out {
		detail = "delivered meanwhile by another consumer"
	}
	r.act(d, recorded, detail, a, wait)
}

// carryOut does what an outcome needs done before its record, and sets
// the record's lineage (--retry-delays). It returns false when the
// delivery needs nothing more: left in claim.in, unacked or requeued.
//
// A delayed retry sends its copy first, and only once the broker has
// confirmed it is the outcome recorded, with the lineage past this step:
// the record then says the copy exists, so that this delivery, redelivered
// because its ack was lost with its connection, is acked without a call
// (claim.StepDone) instead of forking the claim into a second lineage of
// retries. The claim stays held while the copy goes out, so that another
// consumer given the redelivered copy waits for the record. A crash after
// the confirm and before the record can still leave two copies, which is
// the price of never leaving none.
//
// A dead-letter decision is recorded with the lineage past this step
// before the reject: a copy of the same step that comes back fresh (a
// fork's sibling) is acked, while the redelivered one is rejected again
// (claim.DeadBefore), since its reject may never have reached the broker.
func (r *relay) carryOut(soft context.Context, d *delivery, att *claim.Attempt, a partner.Answer, wait later) bool {
	if r.cfg.Retry == nil {
		return true
	}
	switch att.Outcome.Action {
	case claim.DeadLetter:
		att.Lineage = wait.done + 1
	case claim.Delay:
		if r.hard.Err() != nil {
			return true // forced out: record the answer, send nothing
		}
		h := retry.NextHeaders(d.Headers, wait.done, retry.HistoryLine(time.Now(), a.Status, a.Excerpt, wait.delay))
		// The copy goes out through d's own session: after a reconnect,
		// the sender of a session that is over sends nothing, since the
		// ack that must follow the copy cannot (session.go).
		if err := d.s.delay.send(soft, r.hard, d.Delivery, wait.delay, h); err != nil {
			// Not in the delay queue for sure: the answer is recorded (the
			// original, requeued or left in claim.in, comes back to it),
			// then the claim is left in claim.in.
			_, ferr := r.store.Finish(context.WithoutCancel(r.hard), d.id, *att)
			r.answered.Done()
			if ferr != nil && !r.storeUnavailable(ferr) {
				r.storeFailed(d.lg, ferr)
				return false
			}
			r.notDelayed(d, *att, a, wait, err) // requeued, recorded or not
			return false
		}
		att.Lineage = wait.done + 1
	}
	return true
}

// settle records an outcome decided without calling the partner, then
// acts on it.
func (r *relay) settle(d *delivery, out claim.Outcome, why string) {
	detail := out.Describe(0, 0)
	if why != "" {
		detail += ": " + why
	}
	if _, err := r.store.Finish(context.WithoutCancel(r.hard), d.id, claim.Attempt{
		Redelivered: d.Redelivered, Outcome: out, Detail: detail, Error: partner.Excerpt([]byte(why)), Token: r.token(d),
	}); err != nil {
		if r.storeUnavailable(err) {
			r.giveBack(d)
		} else {
			r.storeFailed(d.lg, err)
		}
		return
	}
	r.act(d, out, detail, partner.Answer{}, later{})
}
