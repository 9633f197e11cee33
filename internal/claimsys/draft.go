package claimsys

import (
	"bytes"
	"crypto/sha256"
	"net/http"
)

// keyState is what the stand-in keeps of one Idempotency-Key while it
// enforces the draft: the fingerprint of the first request's payload
// (the draft's "checksum of the entire request payload"), and that
// request's answer once it has one.
type keyState struct {
	sum    [sha256.Size]byte
	done   bool
	status int
}

// draftCheck applies the draft (draft-ietf-httpapi-idempotency-key-header,
// "Idempotency Enforcement Scenarios" and "Error Scenarios") to a request
// with key and body, on its arrival: before the delay and the gate, so
// that a request held there is "still being processed".
//
//	a key never seen                  process it; the key is now in progress
//	seen, another payload             422: the key is already used
//	seen, same payload, not answered  409: a request is outstanding for it
//	seen, same payload, answered      the first answer's status again,
//	                                  without processing it again (a
//	                                  transient answer is not kept)
//
// It returns the status to answer now, and whether it is a replay of the
// first answer, or process true when the request is to be processed
// (draftDone then records its answer). Callers hold mu.
func (s *Server) draftCheck(key string, body []byte) (status int, replay, process bool) {
	sum := sha256.Sum256(body)
	ks := s.keys[key]
	switch {
	case ks == nil:
		s.keys[key] = &keyState{sum: sum}
		return 0, false, true
	case !bytes.Equal(ks.sum[:], sum[:]):
		s.keyCounts.Reused++
		return http.StatusUnprocessableEntity, false, false
	case !ks.done:
		s.keyCounts.InProgress++
		return http.StatusConflict, false, false
	}
	s.keyCounts.Replayed++
	return ks.status, true, false
}

// draftDone records the answer to the request that registered key. A
// transient answer (5xx, 408, 429) is not kept: it asks the client to
// come back, and a retry answered with it again would never get through,
// so the key is forgotten and the retry is processed as a new request.
// Callers hold mu.
func (s *Server) draftDone(key string, status int) {
	if status >= 500 || status == http.StatusRequestTimeout || status == http.StatusTooManyRequests {
		delete(s.keys, key)
		return
	}
	if ks := s.keys[key]; ks != nil {
		ks.done, ks.status = true, status
	}
}

// answerDraft writes the answer draftCheck chose, with the draft's problem
// descriptions (RFC 7807) for 422 and 409.
func answerDraft(w http.ResponseWriter, status int, replay bool) {
	problem := func(title, detail string) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		writeBody(w, map[string]any{"type": "https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/",
			"title": title, "detail": detail, "status": status})
	}
	switch {
	case replay:
		writeJSON(w, status, map[string]string{"status": "replayed: the answer to the first request with this Idempotency-Key"})
	case status == http.StatusUnprocessableEntity:
		problem("Idempotency-Key is already used", "this Idempotency-Key came before with another payload; a changed request needs a new key")
	default:
		problem("A request is outstanding for this Idempotency-Key", "a request with the same Idempotency-Key is being processed; retry later")
	}
}
