package main

import (
	"bytes"
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/publish"
)

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestParseConfig: every flag in its -flag and --flag forms, the defaults,
// the environment, and every range and usage mistake, without a broker.
func TestParseConfig(t *testing.T) {
	defaults := func(files ...string) config {
		return config{publish: publish.Config{Files: files, Window: 256, Timeout: 10 * time.Second, MaxBytes: publish.DefaultMaxBytes,
			Progress: publish.ProgressAuto, URL: broker.DefaultURL}}
	}
	with := func(f func(*config), files ...string) config {
		c := defaults(files...)
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want config
	}{
		{"defaults", []string{"a.json"}, nil, defaults("a.json")},
		{"files in order, stdin once", []string{"a.json", "-", "b.json"}, nil, defaults("a.json", "-", "b.json")},
		{"-window", []string{"-window", "64", "a.json"}, nil, with(func(c *config) { c.publish.Window = 64 }, "a.json")},
		{"--window=", []string{"--window=1", "a.json"}, nil, with(func(c *config) { c.publish.Window = 1 }, "a.json")},
		{"-window at its top", []string{"-window", "10000", "a.json"}, nil, with(func(c *config) { c.publish.Window = 10000 }, "a.json")},
		{"-timeout", []string{"-timeout", "2s", "a.json"}, nil, with(func(c *config) { c.publish.Timeout = 2 * time.Second }, "a.json")},
		{"--timeout, lowest", []string{"--timeout", "100ms", "a.json"}, nil, with(func(c *config) { c.publish.Timeout = 100 * time.Millisecond }, "a.json")},
		{"-timeout, highest", []string{"-timeout=1h", "a.json"}, nil, with(func(c *config) { c.publish.Timeout = time.Hour }, "a.json")},
		{"-max-bytes", []string{"-max-bytes", "1", "a.json"}, nil, with(func(c *config) { c.publish.MaxBytes = 1 }, "a.json")},
		{"--max-bytes, highest", []string{"--max-bytes", "134217728", "a.json"}, nil, with(func(c *config) { c.publish.MaxBytes = 128 << 20 }, "a.json")},
		{"-keep-going", []string{"-keep-going", "a.json"}, nil, with(func(c *config) { c.publish.KeepGoing = true }, "a.json")},
		{"--keep-going", []string{"--keep-going", "a.json"}, nil, with(func(c *config) { c.publish.KeepGoing = true }, "a.json")},
		{"-progress always", []string{"-progress", "always", "a.json"}, nil, with(func(c *config) { c.publish.Progress = publish.ProgressAlways }, "a.json")},
		{"--progress=never", []string{"--progress=never", "a.json"}, nil, with(func(c *config) { c.publish.Progress = publish.ProgressNever }, "a.json")},
		{"-progress auto", []string{"-progress", "auto", "a.json"}, nil, defaults("a.json")},
		{"-json", []string{"-json", "a.json"}, nil, with(func(c *config) { c.json = true }, "a.json")},
		{"--json", []string{"--json", "a.json"}, nil, with(func(c *config) { c.json = true }, "a.json")},
		{"EAI_AMQP_URL", []string{"a.json"}, map[string]string{broker.EnvURL: "amqp://u:p@h:5673/v"},
			with(func(c *config) { c.publish.URL = "amqp://u:p@h:5673/v" }, "a.json")},
		{"TRACEPARENT", []string{"a.json"}, map[string]string{"TRACEPARENT": traceparent},
			with(func(c *config) { c.publish.Headers = amqp.Table{"traceparent": traceparent} }, "a.json")},
		{"flags end at --", []string{"--", "-json"}, nil, defaults("-json")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			got, err := parseConfig(tc.args, mapenv(tc.env), &stdout, &stderr)
			if err != nil {
				t.Fatalf("%q: %v", tc.args, err)
			}
			if got.publish.Getenv == nil {
				t.Error("Getenv is not passed on")
			}
			got.publish.Getenv = nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%q:\n got %+v\nwant %+v", tc.args, got, tc.want)
			}
			if stdout.Len()+stderr.Len() != 0 {
				t.Errorf("printed %q %q", stdout.String(), stderr.String())
			}
		})
	}
}

// TestParseConfigRefuses: each mistake is a usage error (exit 2) that
// says what is wrong.
func TestParseConfigRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		env    map[string]string
		want   string // in the error
		stderr string // what the flag package printed
	}{
		{"no file", nil, nil, "no claim file given", ""},
		{"flags only", []string{"-json"}, nil, "no claim file given", ""},
		{"window 0", []string{"-window", "0", "x"}, nil, "-window 0 is out of range: 1 to 10000", ""},
		{"window 10001", []string{"--window", "10001", "x"}, nil, "-window 10001 is out of range: 1 to 10000", ""},
		{"timeout 99ms", []string{"-timeout", "99ms", "x"}, nil, "-timeout 99ms is out of range: 100ms to 1h0m0s", ""},
		{"timeout 1h1s", []string{"-timeout", "1h0m1s", "x"}, nil, "-timeout 1h0m1s is out of range: 100ms to 1h0m0s", ""},
		{"max-bytes 0", []string{"-max-bytes", "0", "x"}, nil, "-max-bytes 0 is out of range: 1 to 134217728 (128 MiB, RabbitMQ 3.x's default largest message)", ""},
		{"max-bytes over", []string{"-max-bytes", "134217729", "x"}, nil, "-max-bytes 134217729 is out of range: 1 to 134217728", ""},
		{"progress", []string{"-progress", "sometimes", "x"}, nil, "-progress must be auto, always or never", ""},
		{"stdin twice", []string{"-", "a.json", "-"}, nil, "standard input (-) can be given once", ""},
		{"bad TRACEPARENT", []string{"x"}, map[string]string{"TRACEPARENT": "nope"}, `TRACEPARENT "nope" is not a W3C traceparent`, ""},
		{"unknown flag", []string{"-bogus", "x"}, nil, "flag provided but not defined: -bogus",
			"flag provided but not defined: -bogus\nrun 'publish -h' for the manual\n"},
		{"mistyped flag", []string{"--keep-goign", "x"}, nil, "flag provided but not defined: -keep-goign",
			"flag provided but not defined: -keep-goign\ndid you mean --keep-going?\nrun 'publish -h' for the manual\n"},
		{"not a number", []string{"--window", "many", "x"}, nil, `invalid value "many" for flag -window`,
			"invalid value \"many\" for flag -window: parse error\nrun 'publish -h' for the manual\n"},
		{"not a duration", []string{"-timeout", "soon", "x"}, nil, `invalid value "soon" for flag -timeout`,
			"invalid value \"soon\" for flag -timeout: parse error\nrun 'publish -h' for the manual\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			_, err := parseConfig(tc.args, mapenv(tc.env), &stdout, &stderr)
			if cli.Code(err) != cli.ExitUsage || !strings.Contains(fmtErr(err), tc.want) {
				t.Errorf("%q: exit %d, %v; want %d and %q", tc.args, cli.Code(err), err, cli.ExitUsage, tc.want)
			}
			if stdout.Len() != 0 || stderr.String() != tc.stderr {
				t.Errorf("%q: stdout %q, stderr %q; want nothing and %q", tc.args, stdout.String(), stderr.String(), tc.stderr)
			}
		})
	}
}

// TestParseConfigHelpAndVersion: -h, -help and --help print the usage and
// the flags on stdout (followed by full: the manual), -version the
// version; all end the program with exit 0.
func TestParseConfigHelpAndVersion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want func(string) bool
	}{
		{[]string{"-h"}, func(s string) bool { return s == cli.Help(doc, "publish") }},
		{[]string{"-help", "a.json"}, func(s string) bool { return s == cli.Help(doc, "publish") }},
		{[]string{"--help"}, func(s string) bool { return s == cli.Help(doc, "publish") }},
		{[]string{"-h", "full"}, func(s string) bool { return s == cli.Manual(doc) }},
		{[]string{"-window", "3", "--help", "full", "a.json"}, func(s string) bool { return s == cli.Manual(doc) }},
		{[]string{"-version"}, func(s string) bool { return s == cli.Version("publish")+"\n" }},
		{[]string{"--version", "a.json"}, func(s string) bool { return strings.HasPrefix(s, "publish ") }},
	} {
		var stdout, stderr bytes.Buffer
		_, err := parseConfig(tc.args, mapenv(nil), &stdout, &stderr)
		if !errors.Is(err, flag.ErrHelp) || cli.Code(err) != cli.ExitOK || !tc.want(stdout.String()) || stderr.Len() != 0 {
			t.Errorf("%q: %v (exit %d), stderr %q, stdout:\n%s", tc.args, err, cli.Code(err), stderr.String(), stdout.String())
		}
	}
}

func mapenv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
