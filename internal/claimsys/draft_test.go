package claimsys

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestIdempotencyDraft: with the draft enforced, a key's first request is
// processed; the same key with another payload is 422, while the first
// is still being processed (held at the gate) 409, and once it is
// answered, the same payload gets its first status again without being
// processed again; another key is a new request. Without the draft, the
// same calls are processed as the fixture's rules say.
func TestIdempotencyDraft(t *testing.T) {
	s := New()
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer s.Release()
	on := true
	s.Set(Control{IdempotencyDraft: &on})
	type answer struct {
		status int
		ctype  string
	}
	post := func(body, key string) answer {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/v1/claims", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return answer{resp.StatusCode, resp.Header.Get("Content-Type")}
	}
	first := `{"guid":"g","claimId":"C-1","docs":[]}`
	edited := `{"guid":"g","claimId":"C-1","docs":["r.pdf"]}`
	if a := post(first, "g"); a.status != 422 {
		t.Fatalf("first request (no documents): %+v", a)
	}
	if a := post(first, "g"); a.status != 422 || a.ctype != "application/json" {
		t.Errorf("the same again: %+v, want its first answer (422 documents missing) replayed", a)
	}
	if a := post(edited, "g"); a.status != 422 || a.ctype != "application/problem+json" {
		t.Errorf("another payload, same key: %+v, want the draft's 422", a)
	}
	if a := post(edited, "g+edit.0123456789abcdef"); a.status != 201 {
		t.Errorf("the edit under its own key: %+v, want 201", a)
	}

	zero := 0
	s.Set(Control{HoldAfter: &zero}) // the next call waits, "being processed"
	held := make(chan answer, 1)
	go func() { held <- post(`{"guid":"h","claimId":"C-2","docs":["r.pdf"]}`, "h") }()
	deadline := time.Now().Add(5 * time.Second)
	for s.Held() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if a := post(`{"guid":"h","claimId":"C-2","docs":["r.pdf"]}`, "h"); a.status != 409 || a.ctype != "application/problem+json" {
		t.Errorf("while the first is held: %+v, want 409", a)
	}
	s.Release()
	if a := <-held; a.status != 201 {
		t.Errorf("the held request: %+v", a)
	}
	if a := post(`{"guid":"h","claimId":"C-2","docs":["r.pdf"]}`, "h"); a.status != 201 {
		t.Errorf("after it was answered: %+v, want its 201 replayed", a)
	}
	st := s.Stats()
	if st.Draft != (KeyCounts{Reused: 1, InProgress: 1, Replayed: 2}) || st.ByGuid["g"] != 2 || st.ByGuid["h"] != 1 || st.Accepted["h"] != 1 {
		t.Errorf("stats: draft %+v, by_guid %v, accepted %v", st.Draft, st.ByGuid, st.Accepted)
	}

	// A transient answer is not kept: the retry is processed again.
	busy := `{"guid":"b","claimId":"BUSY-1","docs":["r.pdf"]}`
	if a := post(busy, "b"); a.status != 503 {
		t.Fatalf("BUSY: %+v", a)
	}
	if a := post(busy, "b"); a.status != 503 || s.Stats().ByGuid["b"] != 2 {
		t.Errorf("BUSY again: %+v, processed %d times; want a 503 from a second processing", a, s.Stats().ByGuid["b"])
	}

	off := false
	s.Set(Control{IdempotencyDraft: &off, Reset: true})
	if a := post(edited, "g"); a.status != 201 {
		t.Errorf("without the draft: %+v", a)
	}
	if a := post(first, "g"); a.status != 422 || a.ctype != "application/json" {
		t.Errorf("without the draft, the first payload: %+v, want the fixture's 422", a)
	}
}
