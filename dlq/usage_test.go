package main

import (
	"context"
	"eaimq/internal/brokertest"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/store"
)

// TestManual: -h prints the usage and the flags of doc.go's package
// comment on stdout and exits 0 (-h full: all of it), wherever it stands,
// as every flag may; -version names the program, also
// after the command; a mistake in the flags, or one found after them, is
// two lines on stderr (what is wrong, where the manual is), exit 2,
// nothing on stdout. None of these opens the store or dials the broker.
func TestManual(t *testing.T) {
	manual := cli.Manual(doc)
	if !strings.HasPrefix(manual, "Dlq shows why") || !strings.Contains(manual, "Exit status:") {
		t.Fatalf("the manual is not doc.go's package comment:\n%s", manual)
	}
	help := cli.Help(doc, "dlq")
	see := cli.SeeManual("dlq") + "\n"
	brokertest.CheckUsage(t, "dlq", manual, []brokertest.UsageCase{
		{[]string{"-h"}, 0, help, ""},
		{[]string{"--help"}, 0, help, ""},
		{[]string{"list", "-h"}, 0, help, ""},
		{[]string{"-yes", "purge", "X", "--help"}, 0, help, ""},
		{[]string{"show", "X", "-h", "-bogus"}, 0, help, ""},
		{[]string{"-h", "full"}, 0, manual, ""},
		{[]string{"show", "X", "--help", "full"}, 0, manual, ""},
		{[]string{"-version"}, 0, "dlq ", ""},
		{[]string{"list", "--version"}, 0, "dlq ", ""},
		{[]string{"-bogus"}, 2, "", "flag provided but not defined: -bogus\n" + see},
		{[]string{"list", "-bogus"}, 2, "", "flag provided but not defined: -bogus\n" + see},
		{[]string{"list", "--reasn", "rejected"}, 2, "", "flag provided but not defined: -reasn\ndid you mean --reason?\n" + see},
		{[]string{"replay", "X", "-max-replays", "x"}, 2, "", "invalid value \"x\" for flag -max-replays: parse error\n" + see},
		{nil, 2, "", "dlq: no command: list, show, replay, purge, restore, edit, history, serve or ingest\n" + see},
		{[]string{"-json"}, 2, "", "dlq: no command: list, show, replay, purge, restore, edit, history, serve or ingest\n" + see},
		{[]string{"frobnicate"}, 2, "", "dlq: unknown command \"frobnicate\": list, show, replay, purge, restore, edit, history, serve or ingest\n" + see},
		{[]string{"list", "-yes"}, 2, "", "dlq: -yes does nothing for list; leave it out\n" + see},
		{[]string{"list", "-read-only"}, 2, "", "dlq: -read-only does nothing for list; leave it out\n" + see},
		{[]string{"serve", "-addr", "0.0.0.0:8088"}, 2, "", "dlq: -addr 0.0.0.0:8088 is not loopback: anyone who reaches it could replay and purge claims; " +
			"set EAIMQ_DLQ_TOKEN to a secret token, or EAIMQ_DLQ_TOKENS to a file of named ones (or listen on 127.0.0.1)\n" + see},
		{[]string{"serve", "-addr", "8088"}, 2, "", "dlq: -addr \"8088\": want host:port, such as 127.0.0.1:8088\n" + see},
		{[]string{"serve", "-refresh", "10ms"}, 2, "", "dlq: -refresh 10ms: want 0 (never) or 1s to 1h\n" + see},
		{[]string{"serve", "X"}, 2, "", "dlq: serve takes no IDs (the page shows every dead letter)\n" + see},
	}, func(args []string, stdout, stderr io.Writer) error {
		getenv := func(k string) string {
			return map[string]string{
				broker.EnvURL: "amqp://guest:guest@127.0.0.1:1/x", // nothing listens: a test that dialed would fail
				store.EnvPath: filepath.Join(t.TempDir(), "none.db"),
			}[k]
		}
		return run(context.Background(), args, getenv, stdout, stderr)
	})
}

// TestJSONAnywhere: -json means the same before the command, after it and
// among the other flags, for list (one object a line) and show (one
// object).
func TestJSONAnywhere(t *testing.T) {
	w := mixedRun(t)
	for _, group := range []struct {
		lines int
		args  [][]string
	}{
		{4, [][]string{{"-json", "list"}, {"list", "-json"}, {"--json", "list"}, {"list", "--json"}}},
		{2, [][]string{{"-json", "-reason", "rejected", "list"}, {"-reason", "rejected", "list", "-json"}, {"list", "-json", "-reason", "rejected"}}},
		{1, [][]string{{"-json", "show", "nodocs-0"}, {"show", "nodocs-0", "-json"}, {"show", "-json", "nodocs-0"}, {"show", "-json", "--", "nodocs-0"}}},
	} {
		var first string
		for i, args := range group.args {
			code, out, errs := w.dlq(args...)
			if code != 0 || errs != "" {
				t.Fatalf("%q: exit %d\n%s", args, code, errs)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != group.lines {
				t.Errorf("%q: %d lines, want %d:\n%s", args, len(lines), group.lines, out)
			}
			for _, line := range lines {
				var v map[string]any
				if err := json.Unmarshal([]byte(line), &v); err != nil || v["message_id"] == nil {
					t.Errorf("%q: a line that is not a dead letter as JSON (%v):\n%s", args, err, line)
				}
			}
			if i == 0 {
				first = out
			} else if out != first {
				t.Errorf("%q prints other JSON than %q:\n%s\n%s", args, group.args[0], out, first)
			}
		}
	}
}
