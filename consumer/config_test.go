package main

import (
	"bytes"
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/relay"
	"eaimq/internal/retry"
	"eaimq/internal/store"
)

// TestParseConfig: every flag reaches the relay's Config as its value, in
// the --flag and the -flag form alike, with the defaults the manual gives;
// the broker and the store's addresses come from the environment.
func TestParseConfig(t *testing.T) {
	defaults := relay.Config{
		URL: broker.DefaultURL, Claims: "http://127.0.0.1:9202/v1/claims",
		Prefetch: 5, HTTPTimeout: 10 * time.Second, Accept: relay.AcceptSet{201},
		Store: store.DefaultPath, Sync: "full", PauseAfter: 3, StoreWait: 10 * time.Minute, UnreadyAfter: 5,
	}
	plan, err := retry.Parse("1s,10s")
	if err != nil {
		t.Fatal(err)
	}
	twelve := 12.5
	everything := relay.Config{
		URL: "amqp://u:p@broker:5672/claims", Claims: "https://h:8443/base/v1/claims",
		Prefetch: 50, HTTPTimeout: 3 * time.Second, Accept: relay.AcceptSet{201, 202},
		Store: "/var/lib/eaimq/p.db", Sync: "normal", MaxRun: 2500 * time.Millisecond,
		Retry: &plan, PauseWhenDown: true, PauseAfter: 7, UnreadyAfter: 9, MetricsAddr: "127.0.0.1:9464",
		Retain: 90 * 24 * time.Hour, JSON: true, FailOnDead: &twelve, StoreWait: 90 * time.Second, LogJSON: true,
	}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    relay.Config
		level   slog.Level
		logJSON bool
	}{
		{"defaults", []string{"--claim", "http://127.0.0.1:9202"}, nil, defaults, slog.LevelInfo, false},
		{"the lab's call", []string{"--claim", "http://127.0.0.1:9202/", "--max-seconds", "0"}, nil, defaults, slog.LevelInfo, false},
		{"a URL ending in /v1/claims", []string{"--claim", "http://127.0.0.1:9202/v1/claims/"}, nil, defaults, slog.LevelInfo, false},
		{"every flag", []string{
			"--claim", "https://h:8443/base/", "--max-seconds", "2.5", "--prefetch", "50", "--http-timeout", "3s",
			"--sync", "NORMAL", "--accept-status", "201, 202,201", "--log-level", "debug", "--json",
			"--retry-delays", "1s,10s", "--pause-when-down", "--pause-after", "7", "--fail-on-dead", "12.5",
			"--metrics-addr", "127.0.0.1:9464", "--log-format", "json", "--retain", "90d", "--store-wait", "90s",
			"--unready-after", "9", "--profile", "lab",
		}, map[string]string{broker.EnvURL: "amqp://u:p@broker:5672/claims", store.EnvPath: "/var/lib/eaimq/p.db"},
			everything, slog.LevelDebug, true},
		{"--max-seconds below a nanosecond is a deadline", []string{"--claim", "http://127.0.0.1:9202", "--max-seconds", "1e-12"}, nil,
			func() relay.Config { c := defaults; c.MaxRun = 1; return c }(), slog.LevelInfo, false},
		{"--fail-on-dead 0", []string{"--claim", "http://127.0.0.1:9202", "--fail-on-dead", "0", "--log-level", "warn"}, nil,
			func() relay.Config { c, zero := defaults, 0.0; c.FailOnDead = &zero; return c }(), slog.LevelWarn, false},
	} {
		for _, dash := range []string{"--", "-"} {
			t.Run(tc.name+" "+dash, func(t *testing.T) {
				args := make([]string, len(tc.args))
				for i, a := range tc.args {
					if strings.HasPrefix(a, "--") {
						a = dash + a[2:]
					}
					args[i] = a
				}
				var out, errb bytes.Buffer
				got, err := parseConfig(args, func(k string) string { return tc.env[k] }, &out, &errb)
				if err != nil || out.Len() != 0 || errb.Len() != 0 {
					t.Fatalf("%q: %v; stdout %q stderr %q", args, err, out.String(), errb.String())
				}
				if got.relay.Getenv == nil || got.relay.Getenv(broker.EnvURL) != tc.env[broker.EnvURL] {
					t.Error("the relay does not read the environment it was given")
				}
				got.relay.Getenv = nil
				if !reflect.DeepEqual(got.relay, tc.want) || got.level != tc.level || got.relay.LogJSON != tc.logJSON {
					t.Errorf("%q:\n got %+v level %v\nwant %+v level %v", args, got.relay, got.level, tc.want, tc.level)
				}
			})
		}
	}
}

// TestParseConfigMistakes: each mistake is a usage error (exit 2) whose
// message names the flag, printed once (by the flag package for a value
// it cannot parse, else by main), and nothing goes to stdout. No password
// is ever echoed.
func TestParseConfigMistakes(t *testing.T) {
	claim := []string{"--claim", "http://x"}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string // in the error, or on stderr for the flag package's
	}{
		{[]string{"--max-seconds", "1"}, nil, "--claim URL is required"},
		{append(claim, "extra"), nil, `unexpected argument "extra"`},
		{[]string{"--claim", "not a url"}, nil, "is not an http(s) URL with a host"},
		{[]string{"--claim", "ftp://x"}, nil, "is not an http(s) URL with a host"},
		{[]string{"--claim", "http://u:S3cretpw@127.0.0.1:99999"}, nil, "port 99999 is not from 1 to 65535"},
		{append(claim, "--max-seconds", "-1"), nil, "--max-seconds must be a number from 0 to 31536000"},
		{append(claim, "--max-seconds", "1e10"), nil, "--max-seconds"},
		{append(claim, "--max-seconds", "NaN"), nil, "--max-seconds"},
		{append(claim, "--max-seconds", "inf"), nil, "--max-seconds"},
		{append(claim, "--prefetch", "0"), nil, "--prefetch must be between 1 and 65535"},
		{append(claim, "--prefetch", "65536"), nil, "--prefetch must be between 1 and 65535"},
		{append(claim, "--prefetch", "x"), nil, `invalid value "x" for flag -prefetch`},
		{append(claim, "--http-timeout", "0s"), nil, "--http-timeout must be from 1ms to 1h, not 0s"},
		{append(claim, "--http-timeout", "2562047h"), nil, "--http-timeout"},
		{append(claim, "--log-level", "loud"), nil, "--log-level must be debug, info, warn or error"},
		{append(claim, "--log-format", "xml"), nil, `--log-format must be text or json, not "xml"`},
		{append(claim, "--pause-after", "0"), nil, "--pause-after must be from 1 to 1000"},
		{append(claim, "--pause-after", "1001"), nil, "--pause-after must be from 1 to 1000"},
		{append(claim, "--store-wait", "-1s"), nil, "--store-wait must be from 0 to 24h"},
		{append(claim, "--store-wait", "25h"), nil, "--store-wait must be from 0 to 24h"},
		{append(claim, "--unready-after", "0"), nil, "--unready-after must be from 1 to 1000"},
		{append(claim, "--profile", "prod"), nil, `--profile must be lab or production, not "prod"`},
		{claim, map[string]string{envRetryDelays: "1h,500ms"}, `EAIMQ_RETRY_DELAYS: -retry-delays "1h,500ms"`},
		{append(claim, "--retry-delays", "500ms"), nil, `-retry-delays "500ms"`},
		{append(claim, "--retain", "90x"), nil, "--retain"},
		{append(claim, "--sync", "bogus"), nil, `--sync must be full or normal, not "bogus"`},
		{append(claim, "--accept-status", "301"), nil, `--accept-status "301"`},
		{append(claim, "--fail-on-dead", "101"), nil, "want a percentage from 0 to 100"},
		{append(claim, "--fail-on-dead", "-1"), nil, "want a percentage from 0 to 100"},
		{append(claim, "-bogus"), nil, "flag provided but not defined: -bogus"},
		{claim, map[string]string{broker.EnvURL: "http://guest:S3cretpw@h/"}, broker.EnvURL + ": invalid AMQP URL"},
	} {
		var out, errb bytes.Buffer
		_, err := parseConfig(tc.args, func(k string) string { return tc.env[k] }, &out, &errb)
		cli.Report(&errb, "consumer", err)
		if cli.Code(err) != cli.ExitUsage || !strings.Contains(errb.String(), tc.want) || out.Len() != 0 ||
			strings.Count(errb.String(), tc.want) != 1 || strings.Contains(errb.String(), "S3cretpw") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 naming %q", tc.args, cli.Code(err), out.String(), errb.String(), tc.want)
		}
	}
}

// TestParseConfigManual: -h (the usage and the flags), -h full (the
// manual) and -version print on stdout and end the run (flag.ErrHelp,
// exit 0) in either form, wherever they stand.
func TestParseConfigManual(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-h"}, cli.Help(doc, "consumer")},
		{[]string{"--help"}, cli.Help(doc, "consumer")},
		{[]string{"--claim", "http://x", "-help"}, cli.Help(doc, "consumer")},
		{[]string{"-h", "full"}, cli.Manual(doc)},
		{[]string{"--claim", "http://x", "--help", "full"}, cli.Manual(doc)},
		{[]string{"-version"}, "consumer "},
		{[]string{"--version"}, "consumer "},
	} {
		var out, errb bytes.Buffer
		_, err := parseConfig(tc.args, func(string) string { return "" }, &out, &errb)
		if !errors.Is(err, flag.ErrHelp) || cli.Code(err) != 0 || !strings.HasPrefix(out.String(), tc.want) || errb.Len() != 0 {
			t.Errorf("%q: %v, stdout %q, stderr %q", tc.args, err, out.String(), errb.String())
		}
	}
}

// TestParseConfigTouchesNothing: parsing names the store; it does not
// create it.
func TestParseConfigTouchesNothing(t *testing.T) {
	db := filepath.Join(t.TempDir(), "p.db")
	var out, errb bytes.Buffer
	cfg, err := parseConfig([]string{"--claim", "http://x"}, func(k string) string { return map[string]string{store.EnvPath: db}[k] }, &out, &errb)
	if err != nil || cfg.relay.Store != db {
		t.Fatalf("%v, store %q", err, cfg.relay.Store)
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("parseConfig made %s: %v", db, err)
	}
}

func TestParseAccept(t *testing.T) {
	for in, ok := range map[string]bool{"201": true, "201,202": true, " 201 , 200 ": true, "": false, "201,": false, "301": false, "2xx": false, "199": false} {
		if _, err := parseAccept(in); (err == nil) != ok {
			t.Errorf("%q: %v", in, err)
		}
	}
}
