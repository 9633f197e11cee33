package model

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"time"

	"eaimq/internal/claim"
)

// Answer is how the partner answers one claim, call after call.
type Answer uint8

const (
	Accepts    Answer = iota // 201
	Refuses                  // 422: documents missing
	BusyOnce                 // 503, then 201
	AlwaysBusy               // 503, every time
)

var answerNames = [...]string{"201", "422", "503-then-201", "always-503"}

func (a Answer) String() string { return answerNames[a] }

// status is the partner's answer to call number n (0 the first).
func (a Answer) status(n int) int {
	switch a {
	case Accepts:
		return 201
	case Refuses:
		return 422
	case BusyOnce:
		if n == 0 {
			return 503
		}
		return 201
	}
	return 503
}

// Fault is a kind of fault; each is a transition with a budget.
type Fault uint8

const (
	Crash         Fault = iota // a consumer dies at any step
	LostAck                    // a settlement sent, lost with its channel
	Redelivery                 // the channel closes while a worker holds its delivery; the worker goes on
	PublishTwice               // the publisher sends a claim again
	ConfirmLost                // a delayed copy's confirm lost (the copy may or may not be in its queue)
	StoreFail                  // a commit fails, and the store stops answering until it does again
	StoreUnknown               // a commit is written but answered with an error
	StoreOutage                // the store stops answering at any moment
	Timeout                    // the partner did the work; its answer was lost
	DeliveryLimit              // a quorum queue's delivery limit dead-letters a returned copy
	LeaseExpired               // a live holder's lease runs out mid-call (SQLite)
	NumFaults
)

var faultNames = [NumFaults]string{"crash", "lost-ack", "redelivery", "publish-twice", "confirm-lost",
	"store-fail", "store-unknown", "store-outage", "timeout", "delivery-limit", "lease-expired"}

func (f Fault) String() string { return faultNames[f] }

// Config is one model: the claims and how the partner answers each, the
// consumers, the mode, the fault budgets and the rules.
type Config struct {
	Answers   []Answer // one per claim, each published once
	Consumers int
	// Delays is the --retry-delays plan's length; 0 is the lab's
	// requeue-once rule.
	Delays int
	Budget [NumFaults]int
	// MaxFaults bounds the faults in one trace, of all kinds together;
	// 0: only the budgets bound them.
	MaxFaults int
	// StaleStops: a worker whose channel closed before its Begin drops
	// its delivery instead of going on (the broker gave the copy back).
	// True is the relay (handle.go's begin); false is the mutant of a
	// worker that goes on (Mutants), docs/model.md's first finding.
	StaleStops bool
	Rules      Rules
	// MaxStates stops the search (no fixpoint) when reached; 0: no limit.
	MaxStates int
}

// Budgets is a budget of n for every fault kind.
func Budgets(n int) [NumFaults]int {
	var b [NumFaults]int
	for i := range b {
		b[i] = n
	}
	return b
}

func (c Config) plan() []time.Duration {
	p := make([]time.Duration, c.Delays)
	for i := range p {
		p[i] = time.Duration(i+1) * time.Second
	}
	return p
}

// Worker steps: where a consumer is in its per-delivery steps
// (internal/relay handle.go: begin, call, carryOut, finishHeld, act).
const (
	pcIdle   = iota // no delivery
	pcBegin         // a delivery in hand; Begin next
	pcCall          // the claim acquired; the partner's call next
	pcCarry         // a delayed retry decided; its copy to send next
	pcFinish        // the outcome decided (copy confirmed); its record next
	pcAct           // the outcome recorded; the settlement next
)

var pcNames = [...]string{"idle", "begin", "call", "carry", "finish", "act"}

// msg is one copy of a claim on the broker.
type msg struct {
	c     uint8 // the claim
	step  uint8 // the retries behind it (retry.Done)
	tok   uint8 // its copy token (retry.Token); 0: none, a first try
	redel bool  // the redelivered flag
	count uint8 // the quorum queue's delivery count: times returned
}

// worker is one consumer (a channel with one worker, prefetch 1) and the
// delivery in its hands.
type worker struct {
	pc       uint8
	m        msg
	attached bool // its delivery is still on its channel (false once the channel closed)
	stale    bool // its lease on the claim ran out (SQLite)
	prior    uint8
	status   uint16
	out      claim.Outcome
	lineage  uint8 // the attempt's Lineage (carryOut)
	final    bool  // the answer in hand is one the partner acted on or decided (201, 422)
	late     bool  // its record comes after its settlement (Rules.AckBeforeRecord)
	recorded bool  // its record was written, answered with an error; it writes it again
}

// rec is a claim's record (claim.Stored), with the holder as a number: 0
// nobody, 1+i worker i, gone a holder whose process died.
type rec struct {
	state    uint8 // index in stateWords
	reason   uint8
	failures uint8
	lineage  uint8
	deadTok  uint8
	holder   uint8
}

const gone = 255

var stateWords = [...]claim.State{claim.StateNone, claim.StateInFlight, claim.StateDone, claim.StateFailed, claim.StateDead}

func stateIndex(s claim.State) uint8 {
	return uint8(slices.Index(stateWords[:], s))
}

// Windows through which the partner may be called again, or a lineage
// forked; each is named in docs/safety.md with its bound.
const (
	wCrashBeforeRecord = iota // a consumer died with a final answer not yet recorded
	wAnswerLost               // the partner did the work; its answer was lost
	wStoreFailed              // the store failed a 422's record: given back, called again
	wPublishedTwice           // the claim was published again: a fresh copy is tried again
	wLeaseExpired             // a live holder's lease ran out mid-call
	wCrashAfterConfirm        // a delayed copy confirmed, its record not written
	wConfirmLost              // a delayed copy arrived, its confirm did not
	wStaleDelivery            // a worker's channel closed before its Begin, and it went on
	numWindows
)

var windowNames = [numWindows]string{"crash-before-record", "answer-lost", "store-failed", "published-twice",
	"lease-expired", "crash-after-confirm", "confirm-lost", "stale-delivery"}

// cstate is one claim: its record, what the partner did with it, and the
// counts the invariants read.
type cstate struct {
	r         rec
	stale     bool  // its holder's lease ran out
	calls     uint8 // calls to the partner
	transient uint8 // transient answers (503, none)
	accepted  bool  // the partner has the claim (it answered 201, heard or not)
	final     bool  // the partner gave a final answer (201 or 422)
	dups      uint8 // calls after a final answer
	windows   uint8 // window events that allow a call after a final answer
	winMask   uint8 // which
	forks     uint8 // window events that allow another copy of a step
	lost      uint8 // answers lost before their record (each allows a call more)
	published uint8
	dead      uint8 // copies in claim.dead by a reject (the relay's decision)
	limitDead uint8 // copies in claim.dead by the quorum queue's delivery limit
	sends     [4]uint8
	nextTok   uint8
}

// The most a state holds: the slices of a state live in its own arrays,
// so that a successor is one allocation.
const (
	maxQ = 12 // copies in claim.in, or in the delay queues
	maxW = 4  // workers
	maxC = 4  // claims
)

// state is the whole system: the broker, the workers, the claims.
type state struct {
	ready     []msg // claim.in, ready (a bag: any ready copy can be delivered next)
	delay     []msg // the delay queues (a copy becomes ready when its TTL passes)
	workers   []worker
	claims    []cstate
	used      [NumFaults]uint8
	storeDown bool

	rb, db [maxQ]msg
	wb     [maxW]worker
	cb     [maxC]cstate
}

func newState(nw, nc int) *state {
	s := &state{}
	s.ready, s.delay = s.rb[:0:maxQ], s.db[:0:maxQ]
	s.workers, s.claims = s.wb[:nw:nw], s.cb[:nc:nc]
	return s
}

func (s *state) clone() *state {
	t := &state{used: s.used, storeDown: s.storeDown}
	t.ready = append(t.rb[:0:maxQ], s.ready...)
	t.delay = append(t.db[:0:maxQ], s.delay...)
	t.workers = append(t.wb[:0:maxW], s.workers...)
	t.claims = append(t.cb[:0:maxC], s.claims...)
	return t
}

func (m msg) bytes(b []byte) []byte {
	return append(b, m.c, m.step, m.tok, b2u(m.redel), m.count)
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (w worker) bytes(b []byte) []byte {
	b = append(b, w.pc)
	b = w.m.bytes(b)
	return append(b, b2u(w.attached), b2u(w.stale), w.prior, byte(w.status>>8), byte(w.status),
		byte(w.out.Action), byte(w.out.Reason), w.lineage, b2u(w.final), b2u(w.late), b2u(w.recorded))
}

func (c cstate) bytes(b []byte) []byte {
	r := c.r
	b = append(b, r.state, r.reason, r.failures, r.lineage, r.deadTok, r.holder, b2u(c.stale),
		c.calls, c.transient, b2u(c.accepted), b2u(c.final), c.dups, c.windows, c.winMask, c.forks, c.lost,
		c.published, c.dead, c.limitDead, c.nextTok)
	return append(b, c.sends[:]...)
}

func msgLess(a, b msg) int {
	x := [5]byte{a.c, a.step, a.tok, b2u(a.redel), a.count}
	y := [5]byte{b.c, b.step, b.tok, b2u(b.redel), b.count}
	return bytes.Compare(x[:], y[:])
}

// canon puts s in its canonical form: the bags sorted, and the workers
// sorted (they are symmetric), with the records' holders renumbered to
// match, so that states that differ only in which worker is which are
// one state.
func (s *state) canon() []int {
	slices.SortFunc(s.ready, msgLess)
	slices.SortFunc(s.delay, msgLess)
	n := len(s.workers)
	var keys [maxW][32]byte
	for i, w := range s.workers {
		k := w.bytes(keys[i][:0])
		var own uint8
		for ci, c := range s.claims {
			if c.r.holder == uint8(i+1) {
				own |= 1 << ci
			}
		}
		_ = append(k, own)
	}
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	slices.SortStableFunc(perm, func(a, b int) int { return bytes.Compare(keys[a][:], keys[b][:]) })
	var ws [maxW]worker
	var where [maxW]uint8 // old index -> new holder number
	for to, from := range perm {
		ws[to] = s.workers[from]
		where[from] = uint8(to + 1)
	}
	copy(s.workers, ws[:n])
	for ci := range s.claims {
		if h := s.claims[ci].r.holder; h != 0 && h != gone {
			s.claims[ci].r.holder = where[h-1]
		}
	}
	return perm
}

// key is the canonical state's encoding.
func (s *state) key() string { return string(s.appendKey(nil)) }

// appendKey appends the canonical state's encoding to b.
func (s *state) appendKey(b []byte) []byte {
	if len(s.ready) > maxQ || len(s.delay) > maxQ {
		panic("model: more copies than a state holds (maxQ)")
	}
	b = append(b, uint8(len(s.ready)))
	for _, m := range s.ready {
		b = m.bytes(b)
	}
	b = append(b, uint8(len(s.delay)))
	for _, m := range s.delay {
		b = m.bytes(b)
	}
	for _, w := range s.workers {
		b = w.bytes(b)
	}
	for _, c := range s.claims {
		b = c.bytes(b)
	}
	b = append(b, s.used[:]...)
	return append(b, b2u(s.storeDown))
}

// decode is key's inverse, for a state of cfg's shape.
func decode(k string, nw, nc int) *state {
	b := []byte(k)
	s := newState(0, 0)
	rd := func() uint8 { v := b[0]; b = b[1:]; return v }
	rm := func() msg { return msg{c: rd(), step: rd(), tok: rd(), redel: rd() == 1, count: rd()} }
	for n := int(rd()); n > 0; n-- {
		s.ready = append(s.ready, rm())
	}
	for n := int(rd()); n > 0; n-- {
		s.delay = append(s.delay, rm())
	}
	for range nw {
		w := worker{pc: rd(), m: rm(), attached: rd() == 1, stale: rd() == 1, prior: rd()}
		w.status = uint16(rd())<<8 | uint16(rd())
		w.out = claim.Outcome{Action: claim.Action(rd()), Reason: claim.Reason(rd())}
		w.lineage, w.final, w.late, w.recorded = rd(), rd() == 1, rd() == 1, rd() == 1
		s.workers = append(s.wb[:len(s.workers):maxW], w)
	}
	for range nc {
		var c cstate
		c.r = rec{state: rd(), reason: rd(), failures: rd(), lineage: rd(), deadTok: rd(), holder: rd()}
		c.stale, c.calls, c.transient, c.accepted, c.final = rd() == 1, rd(), rd(), rd() == 1, rd() == 1
		c.dups, c.windows, c.winMask, c.forks, c.lost, c.published, c.dead, c.limitDead, c.nextTok = rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()
		for i := range c.sends {
			c.sends[i] = rd()
		}
		s.claims = append(s.cb[:len(s.claims):maxC], c)
	}
	for i := range s.used {
		s.used[i] = rd()
	}
	s.storeDown = rd() == 1
	return s
}

// The record as claim's functions take it, and back.

var tokenNames, holderNames [256]string

func init() {
	for i := 1; i < 256; i++ {
		tokenNames[i] = "t" + strconv.Itoa(i)
		holderNames[i] = "w" + strconv.Itoa(i)
	}
	holderNames[gone] = "gone"
}

func tokenName(t uint8) string { return tokenNames[t] }

func tokenNum(s string) uint8 {
	if s == "" {
		return 0
	}
	n, err := strconv.Atoi(s[1:])
	if err != nil {
		panic(fmt.Sprintf("model: token %q", s))
	}
	return uint8(n)
}

func holderName(h uint8) string { return holderNames[h] }

func holderNum(s string) uint8 {
	switch s {
	case "":
		return 0
	case "gone":
		return gone
	}
	n, err := strconv.Atoi(s[1:])
	if err != nil {
		panic(fmt.Sprintf("model: holder %q", s))
	}
	return uint8(n)
}

func (r rec) stored() claim.Stored {
	return claim.Stored{State: stateWords[r.state], Reason: claim.Reason(r.reason), Failures: int(r.failures),
		Lineage: int(r.lineage), DeadToken: tokenName(r.deadTok), Holder: holderName(r.holder)}
}

// fromStored is the model's record of st. Attempts is left out: no rule
// reads it, and counting it would only tell apart states that behave
// alike (the partner's call count is kept by the claim instead).
func fromStored(st claim.Stored) rec {
	return rec{state: stateIndex(st.State), reason: uint8(st.Reason), failures: uint8(min(st.Failures, 250)),
		lineage: uint8(st.Lineage), deadTok: tokenNum(st.DeadToken), holder: holderNum(st.Holder)}
}
