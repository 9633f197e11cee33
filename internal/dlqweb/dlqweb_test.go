package dlqweb

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8088": true, "127.3.4.5:1": true, "[::1]:8088": true, "localhost:8088": true,
		"0.0.0.0:8088": false, "[::]:8088": false, ":8088": false, "10.1.2.3:8088": false,
		"example.com:8088": false, "127.0.0.1": false, "localhost.evil.example:80": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // "" when accepted
	}{
		{Config{Addr: "127.0.0.1:8088"}, ""},
		{Config{Addr: "0.0.0.0:8088"}, "is not loopback"},
		{Config{Addr: ":8088"}, "is not loopback"},
		{Config{Addr: "0.0.0.0:8088", Tokens: []Token{{SharedName, "short"}}}, "EAIMQ_DLQ_TOKEN is shorter than 16"},
		{Config{Addr: "0.0.0.0:8088", Tokens: []Token{{"alice", "short"}}}, "the token of alice is shorter than 16"},
		{Config{Addr: "0.0.0.0:8088", Tokens: []Token{{SharedName, "0123456789abcdef"}}}, ""},
		{Config{Addr: "8088"}, "want host:port"},
	} {
		err := Check(c.cfg)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Check(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestRebindingRefused: without a token the page answers only requests
// addressed to a loopback name, so that a DNS name rebound to 127.0.0.1
// cannot reach it from a browser. (The backend is never called: nil.)
func TestRebindingRefused(t *testing.T) {
	h, err := New(Config{Addr: "127.0.0.1:8088"})
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"evil.example", "evil.example:8088", "127.0.0.1.nip.io:8088"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusForbidden {
			t.Errorf("Host %s: %d, want 403", host, rec.Code)
		}
	}
}
