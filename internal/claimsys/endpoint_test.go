package claimsys

import (
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"
)

// TestEndpointDownUp: while down, a new connection is refused and a call
// on a kept-alive connection is cut off uncounted; after Up the same
// address answers again. A forced 429 carries Retry-After.
func TestEndpointDownUp(t *testing.T) {
	s := New()
	e, err := Serve(s, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	client := &http.Client{}
	post := func() (*http.Response, error) {
		return client.Post(e.URL()+"/v1/claims", "application/json", strings.NewReader(`{"guid":"g","claimId":"C","docs":["a"]}`))
	}
	resp, err := post()
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("up: %v %v", resp, err)
	}
	resp.Body.Close()

	e.Down()
	_, err = post() // the idle kept-alive connection was closed: a new one is refused
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("down: %v, want connection refused", err)
	}
	if n := s.Total(); n != 1 {
		t.Errorf("%d calls counted, want 1", n)
	}

	if err := e.Up(); err != nil {
		t.Fatal(err)
	}
	status, after := 429, "2"
	s.Set(Control{ForceStatus: &status, RetryAfter: &after})
	resp, err = post()
	if err != nil || resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" {
		t.Fatalf("up again: %v %v", resp, err)
	}
	resp.Body.Close()
	if at := s.CallTimes()["g"]; len(at) != 2 {
		t.Errorf("call times %v", at)
	}
}
