package claimsys

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
)

// ServeHTTP routes the fixture's endpoints and the controls.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/v1/claims" && r.Method == http.MethodPost:
		s.claim(w, r)
	case r.URL.Path == "/_stats" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, s.Stats())
	case r.URL.Path == "/_control" && r.Method == http.MethodPost:
		var c Control
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields() // a misspelt field would otherwise be a silent no-op
		err := dec.Decode(&c)
		if err == nil {
			err = c.Validate()
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		s.Set(c)
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	case r.URL.Path == "/healthz":
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found"})
	}
}

type claimBody struct {
	Guid    string          `json:"guid"`
	ClaimID string          `json:"claimId"`
	Docs    json.RawMessage `json:"docs"`
}

// claim answers POST /v1/claims: after the delay, and the gate, as the
// fixture's rules (or the forced status, or the flap) say, counted.
func (s *Server) claim(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody))
	var c claimBody
	if err == nil {
		err = json.Unmarshal(body, &c)
	}
	key := r.Header.Get("Idempotency-Key")

	s.mu.Lock()
	draft := s.draft && key != ""
	if draft {
		if status, replay, process := s.draftCheck(key, body); !process {
			s.mu.Unlock()
			answerDraft(w, status, replay)
			return
		}
	}
	s.inflight++
	s.maxInflight = max(s.maxInflight, s.inflight)
	delay := s.delay
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
	}()
	// A real claim system goes on with a claim whose caller hung up (it
	// cannot tell a crash from a slow network), so the delay is sat out and
	// the claim counted: a consumer killed mid-call makes a duplicate here,
	// as it would there.
	time.Sleep(delay)

	s.mu.Lock()
	defer s.mu.Unlock()
	// The gate is checked where the answer is decided, under the lock, so
	// that exactly HoldAfter calls are answered 201 before it closes, however
	// many calls were in flight.
	for s.closed() {
		s.held++
		s.gate.Wait()
		s.held--
	}
	if s.down {
		// Down: the call is cut off without an answer and without being
		// counted, as if the connection had broken before it arrived;
		// so its key was never used either.
		if draft {
			delete(s.keys, key)
		}
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // net/http closes the connection
	}
	if key != "" && s.keysOK[key] {
		s.absorbable++
		if s.honourKey {
			s.byStatus[http.StatusOK]++
			writeJSON(w, http.StatusOK, map[string]string{"status": "already accepted", "guid": c.Guid})
			return
		}
	}
	s.total++
	status := s.decide(c, err == nil)
	if draft {
		s.draftDone(key, status)
	}
	s.count(c, err == nil, key, status)
	s.answer(w, c, status)
}

// decide is the status for claim c (valid: its body was a claim JSON
// object). Callers hold mu.
func (s *Server) decide(c claimBody, valid bool) int {
	switch {
	case !valid:
		return http.StatusBadRequest
	case s.force != 0:
		return s.force
	case s.flap:
		status := []int{http.StatusServiceUnavailable, http.StatusCreated}[s.flapNext%2]
		s.flapNext++
		return status
	case emptyDocs(c.Docs):
		return http.StatusUnprocessableEntity
	case strings.HasPrefix(c.ClaimID, "BUSY"):
		return http.StatusServiceUnavailable
	}
	return http.StatusCreated
}

// count records the answer status to claim c in the counters. Callers
// hold mu.
func (s *Server) count(c claimBody, valid bool, key string, status int) {
	if valid {
		s.byGuid[c.Guid]++
		s.callTimes[c.Guid] = append(s.callTimes[c.Guid], time.Now())
		s.byClaimID[c.ClaimID]++
		s.last[c.Guid] = status
	}
	s.byStatus[status]++
	if status == http.StatusCreated {
		s.accepted[c.Guid]++
		if key != "" {
			s.keysOK[key] = true
		}
	}
}

// answer writes status and its body for claim c. Callers hold mu.
func (s *Server) answer(w http.ResponseWriter, c claimBody, status int) {
	switch status {
	case http.StatusCreated:
		writeJSON(w, status, map[string]string{"status": "accepted", "guid": c.Guid, "claimId": c.ClaimID})
	case http.StatusUnprocessableEntity:
		writeJSON(w, status, map[string]string{"error": "documents missing", "claimId": c.ClaimID})
	case http.StatusServiceUnavailable:
		if s.retryAfter != "" {
			w.Header().Set("Retry-After", s.retryAfter)
		}
		writeJSON(w, status, map[string]string{"error": "claim system busy, try later", "claimId": c.ClaimID})
	case http.StatusTooManyRequests:
		if s.retryAfter != "" {
			w.Header().Set("Retry-After", s.retryAfter)
		}
		writeJSON(w, status, map[string]string{"error": "too many requests", "claimId": c.ClaimID})
	case http.StatusBadRequest:
		writeJSON(w, status, map[string]string{"error": "body is not a claim JSON object"})
	default:
		writeJSON(w, status, map[string]string{"error": http.StatusText(status)})
	}
}

// emptyDocs: a missing, null or empty docs list is "documents missing".
func emptyDocs(raw json.RawMessage) bool {
	var docs []any
	if len(raw) == 0 || json.Unmarshal(raw, &docs) != nil {
		return len(raw) == 0 || string(raw) == "null"
	}
	return len(docs) == 0
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	writeBody(w, v)
}

func writeBody(w http.ResponseWriter, v any) { json.NewEncoder(w).Encode(v) }
