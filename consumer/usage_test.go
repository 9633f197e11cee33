package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/relay"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// TestManual: -h prints the usage and the flags of doc.go's package
// comment on stdout and exits 0, -h full all of it; -version names the
// program; a mistake in the flags, or one found after them, is two lines
// on stderr (what is wrong, where the manual is), three with a mistyped
// flag's likely meaning, exit 2, nothing on stdout. None of these touches
// the broker or the store.
func TestManual(t *testing.T) {
	manual := cli.Manual(doc)
	if !strings.HasPrefix(manual, "Consumer moves claims") || !strings.Contains(manual, "Exit status:") {
		t.Fatalf("the manual is not doc.go's package comment:\n%s", manual)
	}
	help := cli.Help(doc, "consumer")
	see := cli.SeeManual("consumer") + "\n"
	brokertest.CheckUsage(t, "consumer", manual, []brokertest.UsageCase{
		{[]string{"-h"}, 0, help, ""},
		{[]string{"--help"}, 0, help, ""},
		{[]string{"--claim", "http://x", "-h"}, 0, help, ""},
		{[]string{"-h", "full"}, 0, manual, ""},
		{[]string{"--claim", "http://x", "--help", "full"}, 0, manual, ""},
		{[]string{"-version"}, 0, "consumer ", ""},
		{[]string{"--version"}, 0, "consumer ", ""},
		{[]string{"-bogus"}, 2, "", "flag provided but not defined: -bogus\n" + see},
		{[]string{"--claim", "http://x", "--max-second", "10"}, 2, "", "flag provided but not defined: -max-second\ndid you mean --max-seconds?\n" + see},
		{[]string{"--claim=http://x", "-pause-when-dwon"}, 2, "", "flag provided but not defined: -pause-when-dwon\ndid you mean -pause-when-down?\n" + see},
		{[]string{"--retian=90d", "--claim", "http://x"}, 2, "", "flag provided but not defined: -retian\ndid you mean --retain?\n" + see},
		{[]string{"--prefetch", "x", "--claim", "http://x"}, 2, "", "invalid value \"x\" for flag -prefetch: parse error\n" + see},
		{[]string{"--max-seconds", "1"}, 2, "", "consumer: --claim URL is required\n" + see},
		{[]string{"--claim", "http://x", "extra"}, 2, "", "consumer: unexpected argument \"extra\"\n" + see},
		{[]string{"--claim", "http://x", "--prefetch", "0"}, 2, "", "consumer: --prefetch must be between 1 and 65535\n" + see},
		{[]string{"--claim", "http://x", "--retry-delays", "500ms"}, 2, "", "consumer: -retry-delays \"500ms\": comma-separated durations, each whole seconds from 1s to 24h (example: 1s,10s,1m)\n" + see},
		{[]string{"--claim", "http://x", "--fail-on-dead", "101"}, 2, "", "invalid value \"101\" for flag -fail-on-dead: want a percentage from 0 to 100\n" + see},
		{[]string{"--claim", "http://x", "--log-format", "xml"}, 2, "", "consumer: --log-format must be text or json, not \"xml\"\n" + see},
		{[]string{"--claim", "http://x", "--pause-after", "0"}, 2, "", "consumer: --pause-after must be from 1 to 1000\n" + see},
	}, func(args []string, stdout, stderr io.Writer) error {
		getenv := func(k string) string {
			return map[string]string{store.EnvPath: filepath.Join(t.TempDir(), "p.db")}[k]
		}
		return run(context.Background(), context.Background(), args, getenv, stdout, stderr)
	})
}

// TestJSONSummary: with --json the summary is one JSON object, the text's
// counts under the text's names, and they match what happened: 3 claims
// delivered and one copy of them a duplicate, 2 rejected with 422, one
// BUSY claim requeued once and dead-lettered when it failed again.
func TestJSONSummary(t *testing.T) {
	h := newHarness(t)
	claims := brokertest.Claims("good", "C-good", 3, true)
	claims = append(claims, claims[0]) // the same guid again
	claims = append(claims, brokertest.Claims("nodocs", "C-nodocs", 2, false)...)
	claims = append(claims, brokertest.Claims("busy", "BUSY", 1, true)...)
	h.vh.PublishClaims(t, claims...)
	c := h.runUntil("3 delivered, 3 dead-lettered", func() bool {
		return h.drained() && h.vh.Depth(t, topo.DeadQueue) == 3
	}, "--json")
	if c.code != 0 {
		t.Fatalf("exit %d:\n%s", c.code, c.stderr.String())
	}
	out := c.stdout.String()
	if strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "{") {
		t.Fatalf("stdout is not one JSON line:\n%s", out)
	}
	var keys map[string]any
	if err := json.Unmarshal([]byte(out), &keys); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := []string{"received", "delivered", "duplicates", "requeued", "dead_lettered", "rejected", "failed_twice",
		"no_id", "unexpected_status", "unsendable", "errors", "seconds"}
	var got []string
	for k := range keys {
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("fields %v, want %v", got, want)
	}
	var s relay.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	seconds := s.Seconds
	s.Seconds = 0
	// 3 + the duplicate + 2 + the BUSY claim twice.
	wantSum := relay.Summary{Received: 8, Delivered: 3, Duplicates: 1, Requeued: 1, DeadLettered: 3, Rejected: 2, FailedTwice: 1}
	if s != wantSum || seconds <= 0 {
		t.Errorf("summary %+v (seconds %v), want %+v", s, seconds, wantSum)
	}
	if n := h.calls("good-000"); n != 1 {
		t.Errorf("good-000 called %d times, want 1", n)
	}
}

// TestJSONNoSummary: a run that never consumed prints no summary, with
// --json as without.
func TestJSONNoSummary(t *testing.T) {
	vh := brokertest.New(t) // no topology: claim.in is missing
	getenv := vh.Getenv(map[string]string{store.EnvPath: filepath.Join(t.TempDir(), "p.db")})
	var out, errb bytes.Buffer
	err := run(context.Background(), context.Background(), []string{"--claim", "http://127.0.0.1:9", "--max-seconds", "1", "--json"}, getenv, &out, &errb)
	if cli.Code(err) != cli.ExitConfig || out.Len() != 0 {
		t.Errorf("exit %d, stdout %q; want %d and nothing", cli.Code(err), out.String(), cli.ExitConfig)
	}
}
