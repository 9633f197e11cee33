package claimsys

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestFixtureRules(t *testing.T) {
	srv := httptest.NewServer(New())
	defer srv.Close()
	post := func(body, key string) int {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/claims", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"guid":"a","claimId":"C-1","docs":["r.pdf"]}`, 201},
		{`{"guid":"b","claimId":"C-2","docs":[]}`, 422},
		{`{"guid":"c","claimId":"C-3"}`, 422},
		{`{"guid":"d","claimId":"BUSY-1","docs":["r.pdf"]}`, 503},
		{`not json`, 400},
	} {
		if got := post(tc.body, ""); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.body, got, tc.want)
		}
	}
	post(`{"guid":"a","claimId":"C-1","docs":["r.pdf"]}`, "a")
	post(`{"guid":"a","claimId":"C-1","docs":["r.pdf"]}`, "a")
	resp, err := http.Get(srv.URL + "/_stats")
	if err != nil {
		t.Fatal(err)
	}
	var st Stats
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if st.ByGuid["a"] != 3 || st.ByGuid["d"] != 1 || st.Total != 7 || st.Absorbable != 1 || st.ByStatus["201"] != 3 {
		t.Errorf("stats: %+v", st)
	}
}

// TestGate: after hold_after 201s every call waits, unanswered, whatever
// it would be answered; Release lets them all finish with their usual
// answer, and later calls pass.
func TestGate(t *testing.T) {
	s := New()
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer s.Release() // before Close, which waits for every request
	two := 2
	s.Set(Control{HoldAfter: &two})
	post := func(ctx context.Context, body string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/claims", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	ctx := context.Background()
	for i := range 2 {
		if code, err := post(ctx, fmt.Sprintf(`{"guid":"g%d","claimId":"C","docs":["r.pdf"]}`, i)); code != 201 {
			t.Fatalf("call %d before the gate: %d %v", i, code, err)
		}
	}
	bodies := []string{
		`{"guid":"g2","claimId":"C","docs":["r.pdf"]}`,
		`{"guid":"g3","claimId":"C","docs":[]}`,
		`{"guid":"g4","claimId":"BUSY","docs":["r.pdf"]}`,
	}
	answers := make(chan int, len(bodies))
	for _, b := range bodies {
		go func() {
			code, err := post(ctx, b)
			if err != nil {
				t.Error(err)
			}
			answers <- code
		}()
	}
	// a caller that hangs up while held: the partner still processes it
	gone, hangUp := context.WithCancel(ctx)
	goneDone := make(chan struct{})
	go func() { post(gone, `{"guid":"g5","claimId":"C","docs":["r.pdf"]}`); close(goneDone) }()
	waitFor(t, "4 calls held", func() bool { return s.Held() == 4 })
	hangUp()
	<-goneDone
	if len(answers) != 0 || s.Total() != 2 {
		t.Fatalf("held calls were answered: %d answers, total %d", len(answers), s.Total())
	}
	if st := s.Stats(); st.Held != 4 {
		t.Errorf("stats held = %d, want 4", st.Held)
	}
	s.Release()
	got := map[int]int{}
	for range bodies {
		got[<-answers]++
	}
	if got[201] != 1 || got[422] != 1 || got[503] != 1 {
		t.Errorf("answers after release: %v, want one each of 201, 422, 503", got)
	}
	waitFor(t, "the hung-up call processed", func() bool { return s.Stats().Accepted["g5"] == 1 })
	if code, _ := post(ctx, `{"guid":"g6","claimId":"C","docs":["r.pdf"]}`); code != 201 || s.Held() != 0 {
		t.Errorf("after release: %d, held %d", code, s.Held())
	}
}

// TestControlEndpoint: the gate and the ranges over POST /_control.
func TestControlEndpoint(t *testing.T) {
	s := New()
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer s.Release()
	control := func(body string) int {
		resp, err := http.Post(srv.URL+"/_control", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for body, want := range map[string]int{
		`{"force_status":42}`:   400,
		`{"force_status":100}`:  400,
		`{"force_status":600}`:  400,
		`{"delay_ms":-1}`:       400,
		`{"delay_ms":600001}`:   400,
		`{"hold_afer":1}`:       400, // misspelt: not a silent no-op
		`{"force_status":0}`:    200,
		`{"delay_ms":0}`:        200,
		`{"force_status":599}`:  200,
		`{"force_status":null}`: 200,
	} {
		if got := control(body); got != want {
			t.Errorf("POST /_control %s: %d, want %d", body, got, want)
		}
	}
	control(`{"force_status":0}`)
	if control(`{"hold_after":0}`) != 200 {
		t.Fatal("hold_after rejected")
	}
	answered := make(chan int, 1)
	go func() {
		resp, err := http.Post(srv.URL+"/v1/claims", "application/json", strings.NewReader(`{"guid":"a","claimId":"C","docs":["r.pdf"]}`))
		if err != nil {
			t.Error(err)
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	waitFor(t, "the call held (GET /_stats)", func() bool {
		resp, err := http.Get(srv.URL + "/_stats")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var st Stats
		json.NewDecoder(resp.Body).Decode(&st)
		return st.Held == 1
	})
	if control(`{"release":true}`) != 200 {
		t.Fatal("release rejected")
	}
	if code := <-answered; code != 201 {
		t.Errorf("released call: %d, want 201", code)
	}
}

// waitFor polls cond until it holds (the gate's state is the condition,
// never a sleep); 10 s is far beyond what an in-process call takes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
