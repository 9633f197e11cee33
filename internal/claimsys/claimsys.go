// Package claimsys is a stand-in for the partner's claim system with the
// lab fixture's behaviour (SPEC "The lab's claim system fixture"):
//
//	POST /v1/claims   docs empty → 422; claimId starting BUSY → 503; else 201
//	GET  /_stats      counts; by_guid is the number of calls per claim
//
// Beyond the fixture, for tests and the demo: a delay per call, a forced
// status or a 503/201 flap, the highest concurrency seen, a count of
// calls whose Idempotency-Key had already been answered 201 (what a partner
// honouring the key would have absorbed), and a gate: after a given number
// of 201s every further call is held, unanswered, until released, so that
// a test can make a fault happen while claims are outstanding instead of
// racing the consumer to it.
//
// Asked to (Control.IdempotencyDraft, claimsys -idempotency-draft), it
// enforces the IETF draft for the Idempotency-Key header
// (draft-ietf-httpapi-idempotency-key-header): a key seen before with
// another payload is answered 422, a key whose first request is still
// being processed 409, and a key whose request completed with the same
// payload gets that first answer's status again without being processed
// again (draft.go).
package claimsys

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// MaxDelay is the longest delay per call the stand-in accepts: longer than
// any client timeout worth testing, short enough that a typo (-delay 10h)
// is caught rather than hanging a demo.
const MaxDelay = 10 * time.Minute

// MaxBody is the largest claim read whole: publish's largest (-max-bytes
// up to 128 MiB). A longer body is cut there, and is then no JSON: 400.
const MaxBody = 128 << 20

// ValidStatus reports whether code can be forced on every call: a final
// HTTP status, 200 to 599. 1xx is informational (net/http would send it
// and then a 200), below 100 makes net/http panic on every request.
func ValidStatus(code int) bool { return code >= 200 && code <= 599 }

// Server is the stand-in. The zero value is not usable; use New.
type Server struct {
	mu          sync.Mutex
	delay       time.Duration
	force       int  // status to answer every call with; 0 = the fixture's rules
	flap        bool // alternate 503, 201, 503, ... (per call)
	flapNext    int
	honourKey   bool // answer a repeated Idempotency-Key with its first 201, without counting a new claim
	draft       bool // enforce the Idempotency-Key draft (draft.go)
	keys        map[string]*keyState
	keyCounts   KeyCounts
	total       int
	byGuid      map[string]int
	byClaimID   map[string]int
	byStatus    map[int]int
	accepted    map[string]int // 201s by guid
	last        map[string]int // last status by guid
	keysOK      map[string]bool
	absorbable  int
	inflight    int
	maxInflight int
	holdAfter   int    // hold every call once this many 201s were answered; -1: no gate
	retryAfter  string // Retry-After on every 429 and 503 ("": none)
	down        bool   // every call is cut off unanswered and uncounted (see Endpoint.Down)
	callTimes   map[string][]time.Time
	held        int        // calls waiting at the gate
	gate        *sync.Cond // on mu; broadcast when the gate opens
}

// New returns a stand-in with the fixture's behaviour.
func New() *Server {
	s := &Server{holdAfter: -1}
	s.gate = sync.NewCond(&s.mu)
	s.reset()
	return s
}

// Held is the number of calls waiting at the gate (see Control.HoldAfter).
func (s *Server) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// Release opens the gate: the held calls go on and are answered, and no
// later call is held until a new HoldAfter is set.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release()
}

func (s *Server) release() {
	s.holdAfter = -1
	s.gate.Broadcast()
}

// closed reports whether a call deciding now must wait. Callers hold mu.
func (s *Server) closed() bool {
	return s.holdAfter >= 0 && s.byStatus[http.StatusCreated] >= s.holdAfter
}

func (s *Server) reset() {
	s.total, s.absorbable, s.maxInflight, s.flapNext = 0, 0, 0, 0
	s.byGuid = map[string]int{}
	s.byClaimID = map[string]int{}
	s.byStatus = map[int]int{}
	s.accepted = map[string]int{}
	s.last = map[string]int{}
	s.keysOK = map[string]bool{}
	s.callTimes = map[string][]time.Time{}
	s.keys = map[string]*keyState{}
	s.keyCounts = KeyCounts{}
}

// Control is the runtime behaviour, settable in-process or by POST /_control.
type Control struct {
	DelayMS     *int  `json:"delay_ms,omitempty"`     // 0 to MaxDelay in ms
	ForceStatus *int  `json:"force_status,omitempty"` // 0 (the fixture's rules) or ValidStatus
	Flap        *bool `json:"flap,omitempty"`
	HonourKey   *bool `json:"honour_idempotency_key,omitempty"`
	// IdempotencyDraft enforces the Idempotency-Key draft: another payload
	// under a key seen before is 422, a key still in progress 409, a key
	// completed with the same payload its first status again.
	IdempotencyDraft *bool `json:"idempotency_draft,omitempty"`
	// HoldAfter closes the gate once N calls in all were answered 201
	// (counted since start or the last reset, so 0 holds the very next
	// call): every call deciding after that waits, unanswered, until
	// Release. A held call then goes on and is answered and counted as
	// usual, even if its caller hung up meanwhile, as a real partner
	// would. A negative N opens the gate.
	HoldAfter *int `json:"hold_after,omitempty"`
	Release   bool `json:"release,omitempty"` // open the gate (after HoldAfter, if both are given)
	// RetryAfter is sent as Retry-After with every 429 and 503 (seconds or
	// an HTTP date; "" sends none).
	RetryAfter *string `json:"retry_after,omitempty"`
	Reset      bool    `json:"reset,omitempty"` // zero the counts; also opens the gate
}

// Validate reports the first field out of its range.
func (c Control) Validate() error {
	if c.DelayMS != nil && (*c.DelayMS < 0 || *c.DelayMS > int(MaxDelay/time.Millisecond)) {
		return fmt.Errorf("delay_ms %d: want 0 to %d", *c.DelayMS, MaxDelay/time.Millisecond)
	}
	if c.ForceStatus != nil && *c.ForceStatus != 0 && !ValidStatus(*c.ForceStatus) {
		return fmt.Errorf("force_status %d: want 0 (the fixture's rules) or 200 to 599", *c.ForceStatus)
	}
	return nil
}

// Set changes the behaviour; nil fields stay as they are. Values out of
// range (see Validate) are the caller's mistake: Set leaves them to it.
func (s *Server) Set(c Control) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.DelayMS != nil {
		s.delay = time.Duration(*c.DelayMS) * time.Millisecond
	}
	if c.ForceStatus != nil {
		s.force = *c.ForceStatus
	}
	if c.Flap != nil {
		s.flap = *c.Flap
	}
	if c.HonourKey != nil {
		s.honourKey = *c.HonourKey
	}
	if c.IdempotencyDraft != nil {
		s.draft = *c.IdempotencyDraft
	}
	if c.HoldAfter != nil {
		if *c.HoldAfter < 0 {
			s.release()
		} else {
			s.holdAfter = *c.HoldAfter
		}
	}
	if c.Release {
		s.release()
	}
	if c.RetryAfter != nil {
		s.retryAfter = *c.RetryAfter
	}
	if c.Reset {
		s.reset()
		s.release()
	}
}

// Stats is GET /_stats.
type Stats struct {
	Total          int            `json:"total"`
	ByGuid         map[string]int `json:"by_guid"`
	ByClaimID      map[string]int `json:"by_claim_id"`
	ByStatus       map[string]int `json:"by_status"`
	Accepted       map[string]int `json:"accepted_by_guid"`
	LastStatus     map[string]int `json:"last_status_by_guid"`
	MaxConcurrency int            `json:"max_concurrency"`
	// Absorbable counts calls that repeated an Idempotency-Key already
	// answered 201: a partner honouring the key would not have processed
	// them twice.
	Absorbable int `json:"idempotency_key_repeats"`
	Held       int `json:"held"` // calls waiting at the gate now
	// Draft is what enforcing the Idempotency-Key draft answered, when it
	// is on; those calls are not counted in total or by_guid: they were
	// not processed.
	Draft KeyCounts `json:"idempotency_draft"`
}

// KeyCounts are the answers of the Idempotency-Key draft's checks.
type KeyCounts struct {
	Reused     int `json:"reused_422"`      // a key seen before, another payload
	InProgress int `json:"in_progress_409"` // a key whose first request is not answered yet
	Replayed   int `json:"replayed"`        // a key completed, the same payload: the first status again
}

// CallTimes returns when each guid's calls were answered, oldest first.
func (s *Server) CallTimes() map[string][]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]time.Time, len(s.callTimes))
	for k, v := range s.callTimes {
		out[k] = append([]time.Time(nil), v...)
	}
	return out
}

// Total is the number of claims answered so far (cheap to poll).
func (s *Server) Total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Total: s.total, ByGuid: map[string]int{}, ByClaimID: map[string]int{}, ByStatus: map[string]int{},
		Accepted: map[string]int{}, LastStatus: map[string]int{}, MaxConcurrency: s.maxInflight, Absorbable: s.absorbable, Held: s.held,
		Draft: s.keyCounts}
	for k, v := range s.byGuid {
		st.ByGuid[k] = v
	}
	for k, v := range s.byClaimID {
		st.ByClaimID[k] = v
	}
	for k, v := range s.byStatus {
		st.ByStatus[strconv.Itoa(k)] = v
	}
	for k, v := range s.accepted {
		st.Accepted[k] = v
	}
	for k, v := range s.last {
		st.LastStatus[k] = v
	}
	return st
}
