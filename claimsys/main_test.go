package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
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
		{[]string{"-json"}, "claimsys: -json goes with -stats"},
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
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
			want := cli.SeeManual("claimsys") + "\n"
			if tc.args[0] == "-dleay" { // one typo from -delay: the suggestion first
				want = "did you mean -delay?\n" + want
			}
			if rest != want {
				t.Errorf("after the mistake, want only %q, got:\n%s", want, rest)
			}
		})
	}
}

// TestManual: -h prints the usage and the flags (exit 0), -h full the
// manual: every flag, every endpoint, how to get a 422 and a 503, the
// /_control fields, the exit codes.
func TestManual(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-h"}, &stdout, &stderr)
	if cli.Code(err) != 0 || stdout.String() != cli.Help(doc, "claimsys") || stderr.Len() != 0 {
		t.Fatalf("-h: exit %d, stderr %q, stdout:\n%s", cli.Code(err), stderr.String(), stdout.String())
	}
	stdout.Reset()
	err = run(context.Background(), []string{"-h", "full"}, &stdout, &stderr)
	if cli.Code(err) != 0 || stdout.String() != cli.Manual(doc) || stderr.Len() != 0 {
		t.Fatalf("-h full: exit %d, stderr %q, stdout:\n%s", cli.Code(err), stderr.String(), stdout.String())
	}
	m := stdout.String()
	if !strings.HasPrefix(m, "Claimsys runs the stand-in") || strings.Contains(m, "package main") {
		t.Errorf("-h does not print the package comment:\n%s", m)
	}
	for _, want := range []string{
		"-addr", "-delay", "-force-status", "-flap", "-stats", "-json", "-version",
		"POST /v1/claims", "GET  /_stats", "POST /_control", "GET  /healthz",
		"To get a 422", "To get a 503", `"delay_ms"`, `"force_status"`, `"flap"`, `"honour_idempotency_key"`,
		`"hold_after"`, `"release"`, `"reset"`, "Exit status", "69  -stats",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("the manual lacks %q", want)
		}
	}
}

// TestVersion: -version names the program, on stdout, exit 0.
func TestVersion(t *testing.T) {
	out, err := exec.Command(brokertest.Binary(t, "eaimq/claimsys"), "-version").Output()
	if err != nil || !strings.HasPrefix(string(out), "claimsys eaimq ") {
		t.Errorf("-version: %v: %q", err, out)
	}
}

// TestStats: -stats prints a line per claim and the totals; -stats -json
// prints the body of GET /_stats as it came.
func TestStats(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr brokertest.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, &stdout, &stderr) }()
	defer func() { cancel(); <-done }()
	var addr string
	re := regexp.MustCompile(`listening on http://(\S+)`)
	brokertest.Eventually(t, 10*time.Second, "claimsys listening", func() bool {
		m := re.FindStringSubmatch(stdout.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	for _, body := range []string{`{"guid":"g-1","claimId":"C-1","docs":["r.pdf"]}`, `{"guid":"g-2","claimId":"C-2","docs":[]}`} {
		resp, err := http.Post("http://"+addr+"/v1/claims", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	stats := func(args ...string) string {
		var out, errb bytes.Buffer
		if err := run(context.Background(), append([]string{"-stats", "-addr", addr}, args...), &out, &errb); err != nil {
			t.Fatalf("-stats %q: %v %s", args, err, errb.String())
		}
		return out.String()
	}
	if got, want := stats(), "g-1 1 1 201\ng-2 1 0 422\n# total 2, max concurrency 1, idempotency-key repeats 0\n"; got != want {
		t.Errorf("-stats:\n%s\nwant:\n%s", got, want)
	}
	got := stats("-json")
	resp, err := http.Get("http://" + addr + "/_stats")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got != strings.TrimRight(string(raw), "\n")+"\n" || strings.Count(got, "\n") != 1 {
		t.Errorf("-stats -json is not the body of /_stats:\n%s\nwant:\n%s", got, raw)
	}
	var st claimsys.Stats
	if err := json.Unmarshal([]byte(got), &st); err != nil || st.Total != 2 || st.ByGuid["g-1"] != 1 || st.Accepted["g-1"] != 1 || st.LastStatus["g-2"] != 422 {
		t.Errorf("-stats -json: %v %+v", err, st)
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
