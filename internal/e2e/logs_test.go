package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/topo"
)

// jsonLines parses stderr as JSON lines: every line must be one JSON
// object with time, level and msg, and no duration may be a bare
// integer of nanoseconds (a key of a duration the consumer logs, without
// its _s).
func jsonLines(t *testing.T, what, stderr string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("%s: a stderr line is not a JSON object (%v): %s", what, err, line)
			continue
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: no %q in %s", what, k, line)
			}
		}
		for _, k := range []string{"latency", "retry_in", "paused", "took", "age"} {
			if _, ok := m[k]; ok {
				t.Errorf("%s: %q without its unit in %s", what, k, line)
			}
		}
		out = append(out, m)
	}
	return out
}

// find is the first line whose msg contains msg, or nil.
func find(lines []map[string]any, msg string) map[string]any {
	for _, m := range lines {
		if s, _ := m["msg"].(string); strings.Contains(s, msg) {
			return m
		}
	}
	return nil
}

// TestJSONLogs: with --log-format json, every line the consumer writes on
// stderr is one JSON object, durations in seconds under a key ending in
// _s: a run that pauses (the claim system down at start, then up), settles
// claims, dead-letters most of them (the warning), and ends on SIGTERM
// (the signal's note); a run forced out by a second signal (the final
// error, exit 130); and mistakes in the flags (exit 2).
func TestJSONLogs(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ep, err := claimsys.Serve(w.partner, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ep.Close)
	jsonRunToSIGTERM(t, w, ep)
	jsonForcedExit(t, w, ep)
	jsonFlagMistakes(t, w)
}

// jsonRunToSIGTERM: a pause, claims settled, most dead-lettered, SIGTERM.
func jsonRunToSIGTERM(t *testing.T, w *world, ep *claimsys.Endpoint) {
	claims := append(brokertest.Claims("json-ok", "C-json", 2, true), brokertest.Claims("json-422", "C-json422", 3, false)...)
	w.publishFiles(claims...)
	ep.Down()
	p := w.start("consumer", "--claim", ep.URL(), "--max-seconds", "120", "--log-format", "json", "--pause-when-down",
		"--pause-after", "1", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	brokertest.Eventually(t, 30*time.Second, "paused", func() bool { return strings.Contains(p.errb.String(), "pausing") })
	if err := ep.Up(); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 60*time.Second, "claim.in drained", func() bool {
		if p.exited() {
			t.Fatalf("consumer exited: %s", p.errb.String())
		}
		q := w.vh.Queues(t)[topo.Queue]
		return q.Messages == 0 && q.Unacked == 0 && w.vh.Queues(t)[topo.DeadQueue].Messages == 3
	})
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	lines := jsonLines(t, "a run to SIGTERM", p.errb.String())
	if m := find(lines, "finishing the claims in flight"); m == nil || m["signal"] != "terminated" {
		t.Errorf("the signal's note: %v", m)
	}
	if m := find(lines, "3 of the 5 claims settled this run were dead-lettered"); m == nil || m["level"] != "WARN" {
		t.Errorf("the dead-letter warning: %v", m)
	}
	if m := find(lines, "resuming"); m == nil || !isSeconds(m["paused_s"]) {
		t.Errorf("the resume line has no paused_s in seconds: %v", m)
	}
	claimLines := 0
	for _, m := range lines {
		if m["msg"] == "claim" && m["status"] != nil {
			claimLines++
			if !isSeconds(m["latency_s"]) {
				t.Errorf("a claim line has no latency_s in seconds: %v", m)
			}
		}
	}
	if claimLines < 5 {
		t.Errorf("%d claim lines with a status, want 5 or more", claimLines)
	}
}

// jsonForcedExit: a second signal while a call is in flight.
func jsonForcedExit(t *testing.T, w *world, ep *claimsys.Endpoint) {
	w.partner.Set(ms(20000))
	w.publishFiles(brokertest.Claims("json-slow", "C-slow", 1, true)...)
	port := freePort(t)
	p := w.start("consumer", "--claim", ep.URL(), "--max-seconds", "120", "--log-format", "json", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
	brokertest.Eventually(t, 30*time.Second, "a call in flight", func() bool {
		return metric(httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port)), "eaimq_claims_in_flight") == 1
	})
	p.cmd.Process.Signal(os.Interrupt)
	brokertest.Eventually(t, 10*time.Second, "the signal's note", func() bool {
		return strings.Contains(p.errb.String(), "finishing the claims in flight")
	})
	p.cmd.Process.Signal(os.Interrupt)
	<-p.done
	if code := p.cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit %d after two signals, want 130", code)
	}
	lines := jsonLines(t, "a forced exit", p.errb.String())
	if m := find(lines, "consumer: forced exit"); m == nil || m["level"] != "ERROR" || m["exit_status"] != 130.0 {
		t.Errorf("the final error line: %v", m)
	}
}

// jsonFlagMistakes: flags that do not parse, or fail a check, when the
// arguments ask for JSON (--log-format, or the production profile).
func jsonFlagMistakes(t *testing.T, w *world) {
	for _, args := range [][]string{
		{"--claim", "http://x", "--log-format", "json", "--prefetch", "0"},
		{"--claim", "http://x", "-log-format=json", "--prefetch", "x"},
		{"--profile", "production", "--claim", "http://x", "--bogus"},
	} {
		r := w.run("consumer", args...)
		lines := jsonLines(t, strings.Join(args, " "), r.stderr)
		if r.code != 2 || len(lines) != 2 || lines[0]["exit_status"] != 2.0 || !strings.Contains(fmt.Sprint(lines[1]["msg"]), "consumer -h") {
			t.Errorf("%q: exit %d, stderr %s", args, r.code, r.stderr)
		}
	}
}

func isSeconds(v any) bool {
	f, ok := v.(float64)
	return ok && f >= 0 && f < 3600
}
