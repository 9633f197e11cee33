package model

import (
	"fmt"
	"time"

	"eaimq/internal/claim"
)

// label names one transition of a state: its kind, the worker or claim
// or copy it is about, and its variant. Replayed on the same state it
// picks the same successor, which is how a trace is told again.
type label struct{ kind, w, i, v uint8 }

// Kinds of transition; a fault's kind is kFault plus the Fault.
const (
	kDeliver  = iota // claim.in delivers a ready copy to an idle worker
	kBegin           // the worker's Begin (claim.Start)
	kCall            // the partner's call, and the decision on its answer (claim.Decide, claim.Delayed)
	kSend            // the delayed copy sent and confirmed (carryOut)
	kFinish          // the record (claim.Finish)
	kAct             // the settlement: ack, nack, reject
	kExpire          // a delayed copy's TTL passes: it is ready in claim.in
	kStoreUp         // the store answers again
	kLeaseOut        // the lease of a holder no longer working on the claim runs out
	kFault
)

// edge is one successor: the transition, the state it leads to, and the
// invariant it broke ("" for none).
type edge struct {
	l    label
	s    *state
	bad  string
	desc string
	perm []int // the workers' canonical order: new index -> index before
}

// checker explores one Config.
type checker struct {
	cfg     Config
	r       Rules
	plan    []time.Duration
	tries   int  // calls a claim may take per copy published: 2 (the lab), or 1 + the delays
	explain bool // write each transition's desc (only when telling a trace)
	accept  claim.AcceptSet
}

func newChecker(cfg Config) *checker {
	r := cfg.Rules
	if r.Start == nil {
		r = Production()
	}
	k := &checker{cfg: cfg, r: r, plan: cfg.plan(), tries: 2, accept: claim.AcceptSet{201}}
	if cfg.Delays > 0 {
		k.tries = cfg.Delays + 1
	}
	return k
}

func (k *checker) initial() *state {
	s := newState(k.cfg.Consumers, len(k.cfg.Answers))
	for c := range s.claims {
		s.claims[c].published = 1
		s.ready = append(s.ready, msg{c: uint8(c)})
	}
	s.canon()
	return s
}

// claimName is A, B, C...
func claimName(c uint8) string { return string(rune('A' + c)) }

func (m msg) String() string {
	s := fmt.Sprintf("%s step %d", claimName(m.c), m.step)
	if m.tok != 0 {
		s += " token " + tokenName(m.tok)
	}
	if m.redel {
		s += " redelivered"
	} else {
		s += " fresh"
	}
	return s
}

// succ lists the successors of canonical state s.
func (k *checker) succ(s *state) []edge {
	var out []edge
	add := func(l label, t *state, bad string, desc func() string) {
		e := edge{l: l, s: t, bad: bad, perm: t.canon()}
		if k.explain {
			e.desc = desc()
		}
		out = append(out, e)
	}
	total := 0
	for _, n := range s.used {
		total += int(n)
	}
	can := func(f Fault) bool {
		return int(s.used[f]) < k.cfg.Budget[f] && (k.cfg.MaxFaults == 0 || total < k.cfg.MaxFaults)
	}
	fault := func(t *state, f Fault) { t.used[f]++ }

	// Deliveries: to the first idle worker (idle workers are alike), of
	// each distinct ready copy. While the store does not answer the
	// relay stops consuming (holdBack).
	if !s.storeDown {
		if wi := firstIdle(s); wi >= 0 {
			for i, m := range s.ready {
				if i > 0 && s.ready[i-1] == m {
					continue
				}
				t := s.clone()
				t.ready = remove(t.ready, i)
				t.workers[wi] = worker{pc: pcBegin, m: m, attached: true}
				add(label{kDeliver, uint8(wi), uint8(i), 0}, t, "", func() string {
					return fmt.Sprintf("{w%d} takes %s", wi+1, m)
				})
			}
		}
	}
	for i, m := range s.delay {
		if i > 0 && s.delay[i-1] == m {
			continue
		}
		t := s.clone()
		t.delay = remove(t.delay, i)
		t.ready = append(t.ready, msg{c: m.c, step: m.step, tok: m.tok})
		add(label{kExpire, 0, uint8(i), 0}, t, "", func() string {
			return fmt.Sprintf("the delay of %s passes: it is ready in claim.in", m)
		})
	}
	if s.storeDown {
		t := s.clone()
		t.storeDown = false
		add(label{kStoreUp, 0, 0, 0}, t, "", func() string { return "the store answers again" })
	}
	for ci, c := range s.claims {
		h := c.r.holder
		if c.r.state != stateIndex(claim.StateInFlight) || h == 0 || h == gone || c.stale || working(s, int(h-1), ci) {
			continue
		}
		t := s.clone()
		t.claims[ci].stale = true
		add(label{kLeaseOut, 0, uint8(ci), 0}, t, "", func() string {
			return fmt.Sprintf("the lease of {w%d} on %s runs out (it holds no delivery of it)", h, claimName(uint8(ci)))
		})
	}

	for wi, w := range s.workers {
		switch w.pc {
		case pcBegin:
			k.begin(s, wi, add)
		case pcCall:
			k.call(s, wi, add, can(Timeout))
		case pcCarry:
			k.send(s, wi, add, can(ConfirmLost))
		case pcFinish:
			k.finish(s, wi, add, can(StoreFail), can(StoreUnknown))
		case pcAct:
			k.act(s, wi, add, can(LostAck))
		}
		if w.pc == pcIdle {
			continue
		}
		if can(Crash) {
			t := s.clone()
			fault(t, Crash)
			k.crash(t, wi)
			add(label{kFault + uint8(Crash), uint8(wi), 0, 0}, t, "", func() string {
				return fmt.Sprintf("FAULT crash: {w%d} dies at its %s step; its delivery goes back, redelivered", wi+1, pcNames[w.pc])
			})
		}
		if can(Redelivery) && w.attached && w.pc != pcAct {
			t := s.clone()
			fault(t, Redelivery)
			t.ready = append(t.ready, returned(w.m))
			t.workers[wi].attached = false
			switch {
			case w.pc == pcBegin && k.cfg.StaleStops:
				t.workers[wi] = worker{}
			case w.pc == pcBegin:
				// A worker goes on with its delivery after its channel
				// closed (session.go does not stop it): before its Begin,
				// it may make a call the redelivered copy makes too.
				t.claims[w.m.c].window(wStaleDelivery)
				t.claims[w.m.c].fork(wStaleDelivery)
			}
			add(label{kFault + uint8(Redelivery), uint8(wi), 0, 0}, t, "", func() string {
				return fmt.Sprintf("FAULT redelivery: {w%d}'s channel closes at its %s step; %s goes back, redelivered, and {w%d} goes on", wi+1, pcNames[w.pc], w.m, wi+1)
			})
		}
		if can(LeaseExpired) && (w.pc == pcCall || w.pc == pcCarry || w.pc == pcFinish) &&
			s.claims[w.m.c].r.holder == uint8(wi+1) && !s.claims[w.m.c].stale {
			t := s.clone()
			fault(t, LeaseExpired)
			c := &t.claims[w.m.c]
			c.stale = true
			t.workers[wi].stale = true
			c.window(wLeaseExpired)
			c.fork(wLeaseExpired)
			add(label{kFault + uint8(LeaseExpired), uint8(wi), 0, 0}, t, "", func() string {
				return fmt.Sprintf("FAULT lease-expired: {w%d}'s lease on %s runs out at its %s step", wi+1, claimName(w.m.c), pcNames[w.pc])
			})
		}
	}

	if can(PublishTwice) {
		for ci, c := range s.claims {
			if c.published > 1 {
				continue
			}
			t := s.clone()
			fault(t, PublishTwice)
			t.ready = append(t.ready, msg{c: uint8(ci)})
			t.claims[ci].published++
			t.claims[ci].window(wPublishedTwice)
			add(label{kFault + uint8(PublishTwice), 0, uint8(ci), 0}, t, "", func() string {
				return fmt.Sprintf("FAULT publish-twice: %s is published again", claimName(uint8(ci)))
			})
		}
	}
	if can(StoreOutage) && !s.storeDown {
		t := s.clone()
		fault(t, StoreOutage)
		t.storeDown = true
		add(label{kFault + uint8(StoreOutage), 0, 0, 0}, t, "", func() string { return "FAULT store-outage: the store stops answering" })
	}
	if can(DeliveryLimit) {
		for i, m := range s.ready {
			if m.count == 0 || (i > 0 && s.ready[i-1] == m) {
				continue
			}
			t := s.clone()
			fault(t, DeliveryLimit)
			t.ready = remove(t.ready, i)
			c := &t.claims[m.c]
			c.limitDead++
			add(label{kFault + uint8(DeliveryLimit), 0, uint8(i), 0}, t, c.checkDead(), func() string {
				return fmt.Sprintf("FAULT delivery-limit: the quorum queue dead-letters %s (returned %d times)", m, m.count)
			})
		}
	}
	return out
}

func firstIdle(s *state) int {
	for i, w := range s.workers {
		if w.pc == pcIdle {
			return i
		}
	}
	return -1
}

// working reports whether worker wi holds a delivery of claim ci between
// its Begin and its record.
func working(s *state, wi, ci int) bool {
	w := s.workers[wi]
	return w.m.c == uint8(ci) && (w.pc == pcCall || w.pc == pcCarry || w.pc == pcFinish)
}

// remove takes copy i out of q, in place.
func remove(q []msg, i int) []msg {
	copy(q[i:], q[i+1:])
	return q[:len(q)-1]
}

// returned is m given back to claim.in: redelivered, and its quorum
// delivery count one higher.
func returned(m msg) msg {
	m.redel = true
	m.count = min(m.count+1, 3)
	return m
}

func (c *cstate) window(w int) {
	c.windows++
	c.winMask |= 1 << w
}

func (c *cstate) fork(w int) {
	c.forks++
	c.winMask |= 1 << w
}

// checkDead is "no more copies in claim.dead than were published", for
// the copies the relay rejects. The broker's delivery limit dead-letters
// a returned copy without asking the record (one whose ack was lost after
// its step was carried out, too): those are counted apart, and named as
// a window in docs/safety.md.
func (c *cstate) checkDead() string {
	allowed := c.published
	if c.forks > 0 && c.winMask&(1<<wLeaseExpired) != 0 {
		// Two copies of a step (a fork window), and a holder whose
		// lease ran out while a second took its sibling: both may be
		// dead-lettered, each by a holder that held it.
		allowed++
	}
	if c.dead > allowed {
		return fmt.Sprintf("more copies rejected into claim.dead (%d) than were published (%d)", c.dead, c.published)
	}
	return ""
}

// giveBack puts worker wi's delivery back in claim.in (nack, requeue) if
// its channel still has it, and frees the worker.
func giveBack(t *state, wi int) {
	if w := t.workers[wi]; w.attached {
		t.ready = append(t.ready, returned(w.m))
	}
	t.workers[wi] = worker{}
}

func (k *checker) holding(wi int) claim.Holding {
	return claim.Holding{Holder: holderName(uint8(wi + 1))}
}

func (k *checker) copyOf(m msg) claim.Copy {
	return claim.Copy{ClaimID: claimName(m.c), Fresh: !m.redel, Step: int(m.step), Token: tokenName(m.tok)}
}

// begin is handle.go's begin: a store that does not answer gives the
// delivery back; Begin settles it without a call, takes the claim, or
// finds it busy (the worker asks again once something changed).
func (k *checker) begin(s *state, wi int, add func(label, *state, string, func() string)) {
	w := s.workers[wi]
	if s.storeDown {
		t := s.clone()
		giveBack(t, wi)
		add(label{kBegin, uint8(wi), 0, 0}, t, "", func() string {
			return fmt.Sprintf("{w%d}: the store does not answer; %s goes back", wi+1, w.m)
		})
		return
	}
	c := s.claims[w.m.c]
	live := c.r.holder != gone && !c.stale
	st, b := k.r.Start(c.r.stored(), k.copyOf(w.m), k.holding(wi), live)
	if b.Result == claim.Busy {
		return // it waits for the holder's outcome: no step until the record changes
	}
	t := s.clone()
	tw := &t.workers[wi]
	tc := &t.claims[w.m.c]
	tc.r = fromStored(st)
	bad := ""
	switch b.Result {
	case claim.Acquired:
		tc.stale = false
		tw.pc, tw.prior = pcCall, uint8(b.Failures)
		for vi, v := range s.workers {
			// A holder counts until its record is written, while its
			// lease holds: one whose lease ran out is a late holder
			// (Finish keeps what it does not hold).
			if vi != wi && working(s, vi, int(w.m.c)) && !v.stale && !v.recorded {
				bad = fmt.Sprintf("two live holders of %s: {w%d} took it while {w%d} still works on it", claimName(w.m.c), wi+1, vi+1)
			}
		}
	case claim.Done:
		tw.pc, tw.out = pcAct, claim.OutDuplicate
	case claim.DeadBefore:
		tw.pc, tw.out = pcAct, b.Prior
	case claim.StepDone:
		tw.pc, tw.out = pcAct, claim.OutSuperseded
	}
	add(label{kBegin, uint8(wi), 0, 0}, t, bad, func() string {
		s := fmt.Sprintf("{w%d} Begin %s: %s", wi+1, w.m, b.Result)
		if b.Result == claim.Acquired {
			s += fmt.Sprintf(" (failures %d)", b.Failures)
		}
		return s
	})
}

// call is the partner's call and the decision on its answer (call and
// carryOut's decision). A timeout fault loses an answer the partner
// acted on.
func (k *checker) call(s *state, wi int, add func(label, *state, string, func() string), timeout bool) {
	w := s.workers[wi]
	c := s.claims[w.m.c]
	st := k.cfg.Answers[w.m.c].status(int(c.calls))
	k.answer(s, wi, st, false, add)
	if timeout && st != 503 {
		k.answer(s, wi, st, true, add)
	}
}

func (k *checker) answer(s *state, wi, st int, lost bool, add func(label, *state, string, func() string)) {
	t := s.clone()
	w := &t.workers[wi]
	c := &t.claims[w.m.c]
	var bads []string
	if c.final {
		c.dups++
		if c.dups > c.windows {
			bads = append(bads, fmt.Sprintf("the partner is called again for %s after its final answer, outside any window", claimName(w.m.c)))
		}
	}
	c.calls++
	switch st {
	case 201:
		c.accepted, c.final = true, true
	case 422:
		c.final = true
	}
	heard := st
	l := label{kCall, uint8(wi), 0, 0}
	if lost {
		t.used[Timeout]++
		c.window(wAnswerLost)
		heard = 0
		l = label{kFault + uint8(Timeout), uint8(wi), 0, 0}
	}
	if heard != 201 && heard != 422 {
		c.transient++
	}
	if bound := k.tries*int(c.published+c.forks) + int(c.windows) + int(c.lost); int(c.calls) > bound {
		bads = append(bads, fmt.Sprintf("the partner is called %d times for %s, more than the retry rule allows (%d)", c.calls, claimName(w.m.c), bound))
	}
	out := k.r.Decide(heard, k.accept, w.m.redel, int(w.prior))
	w.lineage = 0
	if k.cfg.Delays > 0 {
		out, _ = k.r.Delayed(out, k.plan, int(w.m.step), 0)
		if out.Action == claim.DeadLetter {
			w.lineage = w.m.step + 1
		}
	}
	if out == claim.OutFailed && int(c.transient) < k.tries {
		bads = append(bads, fmt.Sprintf("%s is dead-lettered as failed twice after %d transient answers; its retries are %d", claimName(w.m.c), c.transient, k.tries-1))
	}
	w.status, w.out, w.final = uint16(heard), out, st != 503
	switch {
	case out.Action == claim.Delay:
		w.pc = pcCarry
	case k.r.AckBeforeRecord:
		w.pc, w.late = pcAct, true
	default:
		w.pc = pcFinish
	}
	bad := ""
	if len(bads) > 0 {
		bad = bads[0]
	}
	m := w.m
	add(l, t, bad, func() string {
		if lost {
			return fmt.Sprintf("FAULT timeout: the partner answers %d for %s, the answer is lost; {w%d} decides %s", st, m, wi+1, out.Word())
		}
		return fmt.Sprintf("{w%d} calls the partner with %s: %d; decides %s (%s)", wi+1, m, st, out.Word(), out.Reason)
	})
}

// send is carryOut's delayed copy: confirmed, or (a fault) its confirm
// lost, the copy in its queue or not. Without the confirm the answer is
// recorded and the original requeued (notDelayed).
func (k *checker) send(s *state, wi int, add func(label, *state, string, func() string), lost bool) {
	w := s.workers[wi]
	t := s.clone()
	tw := &t.workers[wi]
	c := &t.claims[w.m.c]
	tok := k.sendCopy(t, wi)
	tw.lineage = w.m.step + 1
	if k.r.AckBeforeRecord {
		tw.pc, tw.late = pcAct, true
	} else {
		tw.pc = pcFinish
	}
	add(label{kSend, uint8(wi), 0, 0}, t, c.checkSends(w.m.step), func() string {
		return fmt.Sprintf("{w%d} sends a delayed copy of %s (step %d, token %s); the broker confirms it", wi+1, w.m, w.m.step+1, tokenName(tok))
	})
	if !lost {
		return
	}
	for v := range uint8(2) {
		t := s.clone()
		t.used[ConfirmLost]++
		c := &t.claims[w.m.c]
		c.lost++
		bad := ""
		if v == 0 {
			k.sendCopy(t, wi)
			c.fork(wConfirmLost)
			bad = c.checkSends(w.m.step)
		}
		if !t.storeDown {
			att := k.attempt(t.workers[wi])
			st, _ := k.r.Finish(c.r.stored(), att, k.holding(wi))
			k.setRecord(t, int(w.m.c), st)
		}
		giveBack(t, wi)
		add(label{kFault + uint8(ConfirmLost), uint8(wi), 0, v}, t, bad, func() string {
			where := "it is in its delay queue"
			if v == 1 {
				where = "it never reached the queue"
			}
			return fmt.Sprintf("FAULT confirm-lost: {w%d}'s delayed copy of %s gets no confirm (%s); the answer is recorded, the original requeued", wi+1, w.m, where)
		})
	}
}

func (k *checker) sendCopy(t *state, wi int) uint8 {
	w := t.workers[wi]
	c := &t.claims[w.m.c]
	c.nextTok++
	t.delay = append(t.delay, msg{c: w.m.c, step: w.m.step + 1, tok: c.nextTok})
	c.sends[min(int(w.m.step), len(c.sends)-1)]++
	return c.nextTok
}

func (c *cstate) checkSends(step uint8) string {
	n := c.sends[min(int(step), len(c.sends)-1)]
	if int(n) > int(c.published+c.forks) {
		return fmt.Sprintf("more than one retry lineage: %d delayed copies of step %d sent (published %d, forked by windows %d)", n, step, c.published, c.forks)
	}
	return ""
}

func (k *checker) attempt(w worker) claim.Attempt {
	return claim.Attempt{Redelivered: w.m.redel, Status: int(w.status), Outcome: w.out, Called: true,
		Lineage: int(w.lineage), Token: tokenName(w.m.tok)}
}

func (k *checker) setRecord(t *state, ci int, st claim.Stored) {
	c := &t.claims[ci]
	c.r = fromStored(st)
	if c.r.holder == 0 {
		c.stale = false
	}
}

// finish is finishHeld and recordFailed: the record written, or the store
// failing it. An answer HeldForRecord keeps waits for the store; any
// other goes back to claim.in.
func (k *checker) finish(s *state, wi int, add func(label, *state, string, func() string), fail, unknown bool) {
	w := s.workers[wi]
	att := k.attempt(w)
	held := k.r.HeldForRecord(att)
	if s.storeDown {
		if held {
			return // it waits, unacked, for the store
		}
		t := s.clone()
		k.notRecorded(t, wi)
		add(label{kFinish, uint8(wi), 0, 0}, t, "", func() string {
			return fmt.Sprintf("{w%d}: the store does not answer; %s (%s) goes back unrecorded", wi+1, w.m, w.out.Word())
		})
		return
	}
	t := s.clone()
	st, recorded := k.r.Finish(s.claims[w.m.c].r.stored(), att, k.holding(wi))
	k.setRecord(t, int(w.m.c), st)
	tw := &t.workers[wi]
	if k.r.AckBeforeRecord {
		t.workers[wi] = worker{}
	} else {
		tw.pc, tw.out = pcAct, recorded
	}
	add(label{kFinish, uint8(wi), 0, 0}, t, "", func() string {
		return fmt.Sprintf("{w%d} records %s for %s: record %s lineage %d, to act on: %s", wi+1, w.out.Word(), w.m, st.State, st.Lineage, recorded.Word())
	})
	for v, on := range []bool{fail, unknown} {
		if !on {
			continue
		}
		t := s.clone()
		f := StoreFail
		if v == 1 {
			f = StoreUnknown
			k.setRecord(t, int(w.m.c), st)
		}
		t.used[f]++
		t.storeDown = true
		what := "goes back unrecorded"
		if v == 1 {
			what = "goes back"
		}
		if held {
			what = "waits for the store"
			t.workers[wi].recorded = w.recorded || v == 1
		} else {
			k.notRecorded(t, wi)
		}
		add(label{kFault + uint8(f), uint8(wi), 0, 0}, t, "", func() string {
			if v == 1 {
				return fmt.Sprintf("FAULT store-unknown: {w%d}'s record of %s for %s is written but answered with an error; the store stops answering; it %s", wi+1, w.out.Word(), w.m, what)
			}
			return fmt.Sprintf("FAULT store-fail: {w%d}'s record of %s for %s fails; the store stops answering; it %s", wi+1, w.out.Word(), w.m, what)
		})
	}
}

// notRecorded gives worker wi's delivery back with its answer not on
// record (recordFailed). A 422 given back is called again: the
// store-failed window.
func (k *checker) notRecorded(t *state, wi int) {
	w := t.workers[wi]
	if w.final && w.status == 422 {
		t.claims[w.m.c].window(wStoreFailed)
	}
	t.claims[w.m.c].lost++
	giveBack(t, wi)
}

// act settles the delivery (act.go). On a channel that closed it does
// nothing: the broker gave the copy back already. A lost-ack fault sends
// the settlement and loses it with the channel.
func (k *checker) act(s *state, wi int, add func(label, *state, string, func() string), lost bool) {
	w := s.workers[wi]
	next := func(t *state) {
		if w.late {
			t.workers[wi].pc, t.workers[wi].attached, t.workers[wi].late = pcFinish, false, false
			return
		}
		t.workers[wi] = worker{}
	}
	if !w.attached {
		t := s.clone()
		next(t)
		add(label{kAct, uint8(wi), 0, 0}, t, "", func() string {
			return fmt.Sprintf("{w%d} would %s %s, but its channel is gone (nothing sent)", wi+1, w.out.Word(), w.m)
		})
		return
	}
	t := s.clone()
	c := &t.claims[w.m.c]
	bad := k.ackCheck(s, w)
	switch w.out.Action {
	case claim.Requeue:
		t.ready = append(t.ready, returned(w.m))
	case claim.DeadLetter:
		c.dead++
		bad = c.checkDead()
	}
	next(t)
	add(label{kAct, uint8(wi), 0, 0}, t, bad, func() string {
		return fmt.Sprintf("{w%d} settles %s: %s (%s)", wi+1, w.m, w.out.Word(), w.out.Reason)
	})
	if lost {
		t := s.clone()
		t.used[LostAck]++
		t.ready = append(t.ready, returned(w.m))
		next(t)
		add(label{kFault + uint8(LostAck), uint8(wi), 0, 0}, t, bad, func() string {
			return fmt.Sprintf("FAULT lost-ack: {w%d}'s settlement of %s (%s) is lost with its channel; the copy comes back redelivered", wi+1, w.m, w.out.Word())
		})
	}
}

// ackCheck is "nothing acked without its record": an ack needs the record
// that makes the copy's redelivery harmless.
func (k *checker) ackCheck(s *state, w worker) string {
	r := s.claims[w.m.c].r.stored()
	if w.out.Action != claim.Ack && w.out.Action != claim.Delay {
		return ""
	}
	if w.late {
		return fmt.Sprintf("%s acked (%s) before its record was written (the record says %s)", w.m, w.out.Word(), orNone(r.State))
	}
	// Its record was written (or read, by Begin): a delivered claim's
	// must say done, which nothing overwrites. A lineage on record may
	// have started over since (a claim published again), so a delay's
	// or a superseded copy's is checked where it is written.
	if (w.out == claim.OutDelivered || w.out == claim.OutDuplicate) && r.State != claim.StateDone {
		return fmt.Sprintf("%s acked (%s) without its record (the record says %s)", w.m, w.out.Word(), orNone(r.State))
	}
	return ""
}

func orNone(s claim.State) string {
	if s == claim.StateNone {
		return "nothing"
	}
	return string(s)
}

// crash kills worker wi: its delivery goes back, its holds are a dead
// holder's, and an answer it had not recorded opens a window.
func (k *checker) crash(t *state, wi int) {
	w := t.workers[wi]
	c := &t.claims[w.m.c]
	unrecorded := w.pc == pcCarry || w.pc == pcFinish || w.late
	if unrecorded && w.final {
		c.window(wCrashBeforeRecord)
	}
	if unrecorded {
		c.lost++
	}
	if w.pc == pcFinish && w.out.Action == claim.Delay && w.lineage > 0 {
		c.fork(wCrashAfterConfirm)
	}
	for ci := range t.claims {
		if t.claims[ci].r.holder == uint8(wi+1) {
			t.claims[ci].r.holder = gone
		}
	}
	giveBack(t, wi)
}
