package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/cli"
)

// TestBadInput runs the built program with each bad input: exit 2, the
// mistake on the first line of stderr, then only the pointer to -h.
func TestBadInput(t *testing.T) {
	bin := brokertest.Binary(t, "eaimq/claimsys")
	for _, tc := range []struct {
		args  []string
		first string
	}{
		{[]string{"-force-status", "42"}, "claimsys: -force-status 42: want 0 (the fixture's rules) or an HTTP status 200 to 599"},
		{[]string{"-force-status", "-1"}, "claimsys: -force-status -1: want 0"},
		{[]string{"-force-status", "100"}, "claimsys: -force-status 100: want 0"},
		{[]string{"-force-status", "600"}, "claimsys: -force-status 600: want 0"},
		{[]string{"-force-status", "five"}, `invalid value "five" for flag -force-status`},
		{[]string{"-delay", "-1s"}, "claimsys: -delay -1s: want 0 to 10m0s"},
		{[]string{"-delay", "10m1s"}, "claimsys: -delay 10m1s: want 0 to 10m0s"},
		{[]string{"-delay", "50"}, `invalid value "50" for flag -delay`},
		{[]string{"-addr", "9202"}, `claimsys: -addr "9202": want host:port`},
		{[]string{"-addr", "127.0.0.1:70000"}, `claimsys: -addr "127.0.0.1:70000": the port must be a number, 0 to 65535`},
		{[]string{"-addr", "127.0.0.1:http"}, `claimsys: -addr "127.0.0.1:http": the port must be a number`},
		{[]string{"-dleay", "1s"}, "flag provided but not defined: -dleay"},
		{[]string{"-flap", "extra"}, `claimsys: unexpected argument "extra"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("want exit 2, got %v (it started?)\n%s", err, stderr.String())
			}
			first, rest, _ := strings.Cut(stderr.String(), "\n")
			if ee.ExitCode() != 2 || !strings.HasPrefix(first, tc.first) {
				t.Errorf("exit %d, first line %q; want 2, %q", ee.ExitCode(), first, tc.first)
			}
			if strings.TrimSpace(rest) != seeManual {
				t.Errorf("after the mistake, want only %q, got:\n%s", seeManual, rest)
			}
		})
	}
}

// TestManual: -h prints the manual (exit 0): every flag, every endpoint,
// how to get a 422 and a 503, the /_control fields, the exit codes.
func TestManual(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-h"}, &stdout, &stderr)
	if cli.Code(err) != 0 {
		t.Fatalf("-h: exit %d", cli.Code(err))
	}
	m := stderr.String()
	if !strings.HasPrefix(m, "Claimsys runs the stand-in") || strings.Contains(m, "package main") {
		t.Errorf("-h does not print the package comment:\n%s", m)
	}
	for _, want := range []string{
		"-addr", "-delay", "-force-status", "-flap", "-stats",
		"POST /v1/claims", "GET  /_stats", "POST /_control", "GET  /healthz",
		"To get a 422", "To get a 503", `"delay_ms"`, `"force_status"`, `"flap"`, `"honour_idempotency_key"`,
		`"hold_after"`, `"release"`, `"reset"`, "Exit status", "69  -stats",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("the manual lacks %q", want)
		}
	}
}

// TestServe runs the server: the forced status, /healthz, and a stop
// while a call is held at the gate, which answers it and exits 0.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr brokertest.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-force-status", "503"}, &stdout, &stderr) }()
	var base string
	re := regexp.MustCompile(`listening on (http://\S+)`)
	brokertest.Eventually(t, 10*time.Second, "claimsys listening", func() bool {
		m := re.FindStringSubmatch(stdout.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	})
	post := func(path, body string) int {
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/v1/claims", `{"guid":"a","claimId":"C","docs":["r.pdf"]}`); code != 503 {
		t.Errorf("-force-status 503: got %d", code)
	}
	if resp, err := http.Get(base + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Errorf("/healthz: %v %v", resp, err)
	}
	if code := post("/_control", `{"force_status":0,"hold_after":0}`); code != 200 {
		t.Fatalf("/_control: %d", code)
	}
	answered := make(chan int, 1)
	go func() { answered <- post("/v1/claims", `{"guid":"b","claimId":"C","docs":["r.pdf"]}`) }()
	brokertest.Eventually(t, 10*time.Second, "the call held", func() bool {
		resp, err := http.Get(base + "/_stats")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var st claimsys.Stats
		return json.NewDecoder(resp.Body).Decode(&st) == nil && st.Held == 1
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run after SIGINT: %v", err)
	}
	if code := <-answered; code != 201 {
		t.Errorf("the held call was answered %d on stop, want 201", code)
	}
}
