package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"eaimq/internal/claim"
	"eaimq/internal/cli"
	"eaimq/internal/dlq"
	"eaimq/internal/dlqweb"
)

// defaults is the config of a command given no flag.
func defaults(cmd string, ids ...string) config {
	return config{cmd: cmd, dlq: dlq.Config{IDs: ids, MaxReplays: dlq.DefaultMaxReplays, MaxHeld: dlq.DefaultMaxHeld, Rate: defaultRate,
		Ingest: dlq.IngestConfig{Batch: dlq.DefaultIngestBatch, MaxRows: dlq.DefaultIngestMaxRows, Retention: dlq.DefaultArchiveRetention},
		Page:   dlq.Page{Addr: defaultAddr, Refresh: 5 * time.Second}}}
}

func with(c config, f func(*config)) config { f(&c); return c }

func parse(args []string, env map[string]string) (config, string, string, error) {
	var out, errb bytes.Buffer
	c, err := parseConfig(args, func(k string) string { return env[k] }, &out, &errb)
	if len(c.dlq.IDs) == 0 {
		c.dlq.IDs = nil
	}
	return c, out.String(), errb.String(), err
}

// TestParseConfig: every flag, in both spellings, before the command, after
// it and among the IDs, parses into the config the engine gets.
func TestParseConfig(t *testing.T) {
	const token = "0123456789abcdef"
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want config
	}{
		{[]string{"list"}, nil, defaults("list")},
		{[]string{"-json", "list"}, nil, with(defaults("list"), func(c *config) { c.dlq.JSON = true })},
		{[]string{"list", "--json"}, nil, with(defaults("list"), func(c *config) { c.dlq.JSON = true })},
		{[]string{"-json=false", "list"}, nil, defaults("list")},
		{[]string{"-status", "422", "list"}, nil, with(defaults("list"), func(c *config) { c.dlq.Status = 422 })},
		{[]string{"list", "--status=503"}, nil, with(defaults("list"), func(c *config) { c.dlq.Status = 503 })},
		{[]string{"-reason", "rejected", "list"}, nil, with(defaults("list"), func(c *config) {
			c.reason, c.dlq.Reason, c.dlq.ByReason = "rejected", claim.Rejected, true
		})},
		{[]string{"list", "-reason", "transient"}, nil, with(defaults("list"), func(c *config) {
			c.reason, c.dlq.Reason, c.dlq.ByReason = "transient", claim.FailedTwice, true
		})},
		{[]string{"-limit", "3", "list"}, nil, with(defaults("list"), func(c *config) { c.dlq.Limit = 3 })},
		{[]string{"list", "-max-held", "0"}, nil, with(defaults("list"), func(c *config) { c.dlq.MaxHeld = 0 })},
		{[]string{"list", "-queue"}, nil, with(defaults("list"), func(c *config) { c.queue = true })},
		{[]string{"replay", "-text", "BUSY 503", "-guid", "g-1"}, nil, with(defaults("replay"), func(c *config) { c.dlq.Text, c.dlq.GUID = "BUSY 503", "g-1" })},
		{[]string{"ingest", "-archive-queue", "-archive-retention", "720h"}, nil, with(defaults("ingest"), func(c *config) {
			c.dlq.Ingest.ArchiveQueue, c.dlq.Ingest.Retention = true, 720*time.Hour
		})},
		{[]string{"replay", "-all", "-rate", "20", "-queue"}, nil, with(defaults("replay"), func(c *config) { c.all, c.dlq.Rate, c.queue, c.rateSet = true, 20, true, true })},
		{[]string{"ingest", "-batch", "50", "-max-rows", "1000"}, nil, with(defaults("ingest"), func(c *config) {
			c.dlq.Ingest.Batch, c.dlq.Ingest.MaxRows = 50, 1000
		})},
		{[]string{"serve", "-ingest"}, nil, with(defaults("serve"), func(c *config) { c.ingest = true })},
		{[]string{"-no-store", "list"}, nil, with(defaults("list"), func(c *config) { c.noStore = true })},
		{[]string{"-no-store", "-reason", "unknown", "list"}, nil, with(defaults("list"), func(c *config) {
			c.noStore, c.reason, c.dlq.Reason, c.dlq.ByReason = true, "unknown", claim.ReasonUnknown, true
		})},
		{[]string{"show", "X"}, nil, defaults("show", "X")},
		{[]string{"show", "X", "-json"}, nil, with(defaults("show", "X"), func(c *config) { c.dlq.JSON = true })},
		{[]string{"show", "-json", "--", "-odd"}, nil, with(defaults("show", "-odd"), func(c *config) { c.dlq.JSON = true })},
		{[]string{"show", "--", "-json"}, nil, defaults("show", "-json")},
		{[]string{"replay", "-all"}, nil, with(defaults("replay"), func(c *config) { c.all = true })},
		{[]string{"replay", "X", "-force"}, nil, with(defaults("replay", "X"), func(c *config) { c.dlq.Force = true })},
		{[]string{"--force", "replay", "X", "Y"}, nil, with(defaults("replay", "X", "Y"), func(c *config) { c.dlq.Force = true })},
		{[]string{"replay", "X", "-max-replays", "6", "Y"}, nil, with(defaults("replay", "X", "Y"), func(c *config) { c.dlq.MaxReplays = 6 })},
		{[]string{"-status", "503", "replay"}, nil, with(defaults("replay"), func(c *config) { c.dlq.Status = 503 })},
		{[]string{"purge", "X", "-yes"}, nil, with(defaults("purge", "X"), func(c *config) { c.dlq.Yes = true })},
		{[]string{"-yes", "-reason", "unknown", "purge", "-all"}, nil, with(defaults("purge"), func(c *config) {
			c.dlq.Yes, c.all, c.reason, c.dlq.Reason, c.dlq.ByReason = true, true, "unknown", claim.ReasonUnknown, true
		})},
		{[]string{"purge", "-limit=2", "-all"}, nil, with(defaults("purge"), func(c *config) { c.dlq.Limit, c.all = 2, true })},
		{[]string{"serve"}, nil, defaults("serve")},
		{[]string{"serve", "-read-only", "-refresh", "0"}, nil, with(defaults("serve"), func(c *config) {
			c.dlq.Page.ReadOnly, c.dlq.Page.Refresh = true, 0
		})},
		{[]string{"--refresh=1h", "serve", "--max-replays", "1000"}, nil, with(defaults("serve"), func(c *config) {
			c.dlq.Page.Refresh, c.dlq.MaxReplays = time.Hour, 1000
		})},
		{[]string{"serve", "-addr", "0.0.0.0:8088"}, map[string]string{dlqweb.EnvToken: token}, with(defaults("serve"), func(c *config) {
			c.dlq.Page.Addr, c.tokens = "0.0.0.0:8088", []dlqweb.Token{{Name: dlqweb.SharedName, Value: token}}
		})},
		{[]string{"serve", "-addr", "[::1]:9000"}, nil, with(defaults("serve"), func(c *config) { c.dlq.Page.Addr = "[::1]:9000" })},
	} {
		got, out, errs, err := parse(tc.args, tc.env)
		if err != nil || out != "" || errs != "" {
			t.Errorf("%q: %v, stdout %q, stderr %q", tc.args, err, out, errs)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.args, got, tc.want)
		}
	}
}

// TestParseConfigRefuses: usage mistakes are usage errors (exit 2), with
// the message cli.Report prints after "dlq: ".
func TestParseConfigRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "no command: list, show, replay, purge, restore, edit, history, serve or ingest"},
		{[]string{"-json"}, nil, "no command: list, show, replay, purge, restore, edit, history, serve or ingest"},
		{[]string{"frobnicate"}, nil, `unknown command "frobnicate": list, show, replay, purge, restore, edit, history, serve or ingest`},
		// A flag of another command, before the command or after it.
		{[]string{"-yes", "list"}, nil, "-yes does nothing for list; leave it out"},
		{[]string{"list", "-yes"}, nil, "-yes does nothing for list; leave it out"},
		{[]string{"list", "-read-only"}, nil, "-read-only does nothing for list; leave it out"},
		{[]string{"-yes", "-force", "list"}, nil, "-force, -yes does nothing for list; leave it out"},
		{[]string{"list", "-max-replays", "0"}, nil, "-max-replays does nothing for list; leave it out"},
		{[]string{"-refresh", "1s", "list"}, nil, "-refresh does nothing for list; leave it out"},
		{[]string{"-json", "replay", "-all"}, nil, "-json does nothing for replay; leave it out"},
		{[]string{"-force", "purge", "-all", "-yes"}, nil, "-force does nothing for purge; leave it out"},
		{[]string{"show", "X", "-status", "422"}, nil, "-status does nothing for show; leave it out"},
		{[]string{"serve", "-all"}, nil, "-all does nothing for serve; leave it out"},
		{[]string{"serve", "-json", "-yes", "-reason", "bad"}, nil, "-json, -reason, -yes does nothing for serve; leave it out"},
		// Ranges.
		{[]string{"-status", "42", "list"}, nil, "-status 42: want an HTTP status, 100-599, none or 0 (any)"},
		{[]string{"-status", "600", "replay"}, nil, "-status 600: want an HTTP status, 100-599, none or 0 (any)"},
		{[]string{"-reason", "bad", "list"}, nil, `-reason "bad": want one of ` + strings.Join(claim.ReasonWords(), ", ") + ", crash-loop (or transient)"},
		{[]string{"-limit", "-1", "list"}, nil, "-limit -1: want 0 (all) or more"},
		{[]string{"-max-held", "-1", "list"}, nil, "-max-held -1: want 0 (no bound) or more"},
		{[]string{"ingest", "-batch", "0"}, nil, "-batch 0: want 1-10000"},
		{[]string{"ingest", "-max-rows", "0"}, nil, "-max-rows 0: want 1 or more"},
		{[]string{"ingest", "X"}, nil, "ingest takes no IDs (it takes every dead letter of claim.dead)"},
		{[]string{"-queue", "history", "X"}, nil, "-queue does nothing for history; leave it out"},
		{[]string{"-rate", "5", "purge", "X"}, nil, "-rate does nothing for purge; leave it out"},
		{[]string{"replay", "-all", "-rate", "-1"}, nil, "-rate -1: want 0 (no pacing) or more"},
		{[]string{"ingest", "-archive-retention", "1m"}, nil, "-archive-retention 1m0s: want 1h or more"},
		{[]string{"serve", "-archive-queue"}, nil, "-archive-queue does nothing for serve; leave it out"},
		{[]string{"-max-replays", "0", "replay", "-all"}, nil, "-max-replays 0: want 1-1000"},
		{[]string{"-max-replays", "1001", "serve"}, nil, "-max-replays 1001: want 1-1000"},
		{[]string{"serve", "-refresh", "10ms"}, nil, "-refresh 10ms: want 0 (never) or 1s to 1h"},
		{[]string{"serve", "-refresh", "2h"}, nil, "-refresh 2h0m0s: want 0 (never) or 1s to 1h"},
		{[]string{"-no-store", "-status", "422", "list"}, nil, "-status and -reason read the store, and -no-store reads none: only -reason unknown selects anything then"},
		{[]string{"-no-store", "-reason", "rejected", "list"}, nil, "-status and -reason read the store, and -no-store reads none: only -reason unknown selects anything then"},
		// IDs.
		{[]string{"show", ""}, nil, "an empty ID names no dead letter (a message without a message_id goes by its guid or sha256: key, as list shows)"},
		{[]string{"-yes", "purge", "X", ""}, nil, "an empty ID names no dead letter (a message without a message_id goes by its guid or sha256: key, as list shows)"},
		{[]string{"list", "X"}, nil, "list takes no IDs (use show ID)"},
		{[]string{"show"}, nil, "show takes one ID"},
		{[]string{"show", "X", "Y"}, nil, "show takes one ID"},
		{[]string{"replay"}, nil, "replay needs IDs, -all, or a filter (-status, -reason, -guid, -text)"},
		{[]string{"purge", "-yes"}, nil, "purge needs IDs, -all, or a filter (-status, -reason, -guid, -text)"},
		{[]string{"replay", "-all", "X"}, nil, "give IDs or -all, not both"},
		{[]string{"serve", "X"}, nil, "serve takes no IDs (the page shows every dead letter)"},
		// serve's address.
		{[]string{"serve", "-addr", "0.0.0.0:8088"}, nil, "-addr 0.0.0.0:8088 is not loopback: anyone who reaches it could replay and purge claims; " +
			"set EAIMQ_DLQ_TOKEN to a secret token, or EAIMQ_DLQ_TOKENS to a file of named ones (or listen on 127.0.0.1)"},
		{[]string{"serve", "-addr", "8088"}, nil, `-addr "8088": want host:port, such as 127.0.0.1:8088`},
		{[]string{"serve", "-addr", "0.0.0.0:8088"}, map[string]string{dlqweb.EnvToken: "short"}, "EAIMQ_DLQ_TOKEN is shorter than 16 characters: too easy to guess"},
	} {
		_, out, errs, err := parse(tc.args, tc.env)
		if cli.Code(err) != cli.ExitUsage || err == nil || err.Error() != tc.want || out != "" || errs != "" {
			t.Errorf("%q: exit %d, %v, stdout %q, stderr %q; want exit 2, %q", tc.args, cli.Code(err), err, out, errs, tc.want)
		}
	}
}

// TestParseConfigHelpAndMistakes: -h and -version anywhere print on stdout
// and stop (exit 0); a flag that no command has, or a bad value, is the
// flag package's line and where the manual is, on stderr (exit 2).
func TestParseConfigHelpAndMistakes(t *testing.T) {
	manual, help := cli.Manual(doc), cli.Help(doc, "dlq")
	see := cli.SeeManual("dlq") + "\n"
	for _, tc := range []struct {
		args         []string
		code         int
		stdout, errs string // stdout: a prefix
	}{
		{[]string{"-h"}, 0, help, ""},
		{[]string{"--help"}, 0, help, ""},
		{[]string{"list", "-h"}, 0, help, ""},
		{[]string{"-yes", "purge", "X", "--help"}, 0, help, ""},
		{[]string{"show", "X", "-h", "-bogus"}, 0, help, ""},
		{[]string{"-h", "full"}, 0, manual, ""},
		{[]string{"list", "-h", "full"}, 0, manual, ""},
		{[]string{"-version"}, 0, "dlq ", ""},
		{[]string{"-version", "list", "-bogus"}, 0, "dlq ", ""},
		{[]string{"list", "--version"}, 0, "dlq ", ""},
		{[]string{"replay", "X", "-version"}, 0, "dlq ", ""},
		{[]string{"-bogus"}, 2, "", "flag provided but not defined: -bogus\n" + see},
		{[]string{"list", "-bogus"}, 2, "", "flag provided but not defined: -bogus\n" + see},
		{[]string{"list", "-yes", "-bogus"}, 2, "", "flag provided but not defined: -bogus\n" + see},
		{[]string{"list", "-max-replays", "x"}, 2, "", "invalid value \"x\" for flag -max-replays: parse error\n" + see},
		{[]string{"replay", "X", "-max-replays", "x"}, 2, "", "invalid value \"x\" for flag -max-replays: parse error\n" + see},
		{[]string{"-refresh", "soon", "serve"}, 2, "", "invalid value \"soon\" for flag -refresh: parse error\n" + see},
		{[]string{"purge", "-limit"}, 2, "", "flag needs an argument: -limit\n" + see},
		// A slip of the keyboard gets the flag it most likely meant, with
		// the dashes typed, before and after the command.
		{[]string{"-jsno", "list"}, 2, "", "flag provided but not defined: -jsno\ndid you mean -json?\n" + see},
		{[]string{"replay", "X", "--max-replay", "3"}, 2, "", "flag provided but not defined: -max-replay\ndid you mean --max-replays?\n" + see},
	} {
		_, out, errs, err := parse(tc.args, nil)
		if cli.Code(err) != tc.code || !strings.HasPrefix(out, tc.stdout) || (tc.stdout == "") != (out == "") || errs != tc.errs {
			t.Errorf("%q: exit %d, stdout %.60q, stderr %q; want %d, %.60q, %q", tc.args, cli.Code(err), out, errs, tc.code, tc.stdout, tc.errs)
		}
		if (tc.stdout == manual || tc.stdout == help) && out != tc.stdout {
			t.Errorf("%q: stdout is not exactly the manual, or -h's help", tc.args)
		}
		if tc.code == 0 && !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%q: %v, want flag.ErrHelp (do nothing more)", tc.args, err)
		}
	}
}

// TestEachCommandItsFlags: each command's FlagSet holds the flags the
// manual lists for it, and only those; the refusal of a stray flag is
// derived from these sets.
func TestEachCommandItsFlags(t *testing.T) {
	want := map[string]string{
		"list":    "archive guid json limit max-held no-store queue reason status text",
		"show":    "archive json limit max-held no-store queue",
		"replay":  "all force guid limit max-held max-replays no-store queue rate reason status text",
		"purge":   "all guid limit max-held no-archive no-store queue reason status text yes",
		"restore": "limit max-held no-store queue",
		"edit":    "body limit max-held no-store queue",
		"history": "json",
		"ingest":  "archive-queue archive-retention batch max-rows metrics-addr",
		"serve":   "addr archive-retention batch ingest limit max-held max-replays max-rows metrics-addr no-archive no-store read-only refresh",
	}
	var c config
	for _, cmd := range commands {
		var names []string
		c.flagSet(cmd).VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if got := strings.Join(names, " "); got != want[cmd] {
			t.Errorf("%s takes %s, want %s", cmd, got, want[cmd])
		}
	}
}

// TestPaceKeepsTheLabsReplay: without ingestion a replay is not paced
// unless -rate is given (the lab's default); over ingested rows it is.
func TestPaceKeepsTheLabsReplay(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		ingested int64
		want     float64
	}{
		{[]string{"replay", "-all"}, 0, 0},
		{[]string{"replay", "-all"}, 3, defaultRate},
		{[]string{"replay", "-all", "-queue"}, 3, 0},
		{[]string{"replay", "-all", "-rate", "20"}, 0, 20},
		{[]string{"serve"}, 0, 0},
		{[]string{"serve", "-ingest"}, 0, defaultRate},
	} {
		c, err := parseConfig(tc.args, func(string) string { return "" }, io.Discard, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		c.pace(tc.ingested)
		if c.dlq.Rate != tc.want {
			t.Errorf("%q with %d ingested: rate %v, want %v", tc.args, tc.ingested, c.dlq.Rate, tc.want)
		}
	}
}
