package main

import (
	"eaimq/internal/clitest"
	"io"
	"testing"
	"time"
)

// TestParseConfig: every flag in its -flag and --flag forms, each range,
// -h and -version, without listening.
func TestParseConfig(t *testing.T) {
	base := config{addr: "127.0.0.1:9202"}
	with := func(f func(*config)) config { c := base; f(&c); return c }
	for _, tc := range []struct {
		name string
		args []string
		want config
		code int    // exit code of the error; 0 with want
		msg  string // the error, or what stdout starts with for -h and -version
	}{
		{name: "defaults", want: base},
		{name: "-addr", args: []string{"-addr", "127.0.0.1:0"}, want: with(func(c *config) { c.addr = "127.0.0.1:0" })},
		{name: "--addr=", args: []string{"--addr=:9300"}, want: with(func(c *config) { c.addr = ":9300" })},
		{name: "-addr without a port", args: []string{"-addr", "9202"}, code: 2, msg: `-addr "9202": want host:port (127.0.0.1:9202)`},
		{name: "-addr port out of range", args: []string{"-addr", "127.0.0.1:70000"}, code: 2, msg: `-addr "127.0.0.1:70000": the port must be a number, 0 to 65535`},
		{name: "-addr named port", args: []string{"-addr", "127.0.0.1:http"}, code: 2, msg: `-addr "127.0.0.1:http": the port must be a number`},
		{name: "-delay", args: []string{"-delay", "250ms"}, want: with(func(c *config) { c.delay = 250 * time.Millisecond })},
		{name: "--delay the most", args: []string{"--delay", "10m"}, want: with(func(c *config) { c.delay = 10 * time.Minute })},
		{name: "-delay negative", args: []string{"-delay", "-1s"}, code: 2, msg: "-delay -1s: want 0 to 10m0s"},
		{name: "-delay too long", args: []string{"-delay", "10m1s"}, code: 2, msg: "-delay 10m1s: want 0 to 10m0s"},
		{name: "-delay not a duration", args: []string{"-delay", "50"}, code: 2},
		{name: "-force-status", args: []string{"-force-status", "503"}, want: with(func(c *config) { c.force = 503 })},
		{name: "--force-status bounds", args: []string{"--force-status", "599"}, want: with(func(c *config) { c.force = 599 })},
		{name: "-force-status 0", args: []string{"-force-status", "0"}, want: base},
		{name: "-force-status 42", args: []string{"-force-status", "42"}, code: 2,
			msg: "-force-status 42: want 0 (the fixture's rules) or an HTTP status 200 to 599"},
		{name: "-force-status 100", args: []string{"-force-status", "100"}, code: 2, msg: "-force-status 100: want 0"},
		{name: "-force-status 600", args: []string{"-force-status", "600"}, code: 2, msg: "-force-status 600: want 0"},
		{name: "-flap", args: []string{"-flap"}, want: with(func(c *config) { c.flap = true })},
		{name: "--flap", args: []string{"--flap"}, want: with(func(c *config) { c.flap = true })},
		{name: "-idempotency-draft", args: []string{"-idempotency-draft"}, want: with(func(c *config) { c.draft = true })},
		{name: "--idempotency-draft=false", args: []string{"--idempotency-draft=false"}, want: base},
		{name: "-stats", args: []string{"-stats"}, want: with(func(c *config) { c.stats = true })},
		{name: "--stats --json", args: []string{"--stats", "--json"}, want: with(func(c *config) { c.stats, c.json = true, true })},
		{name: "-json without -stats", args: []string{"-json"}, code: 2, msg: "-json goes with -stats"},
		{name: "an argument", args: []string{"-flap", "extra"}, code: 2, msg: `unexpected argument "extra"`},
		{name: "an argument before a bad value", args: []string{"-force-status", "42", "extra"}, code: 2, msg: `unexpected argument "extra"`},
		{name: "an unknown flag", args: []string{"-dleay", "1s"}, code: 2},
		{name: "-h", args: []string{"-h"}, msg: "Claimsys runs the stand-in"},
		{name: "--help", args: []string{"--help"}, msg: "Claimsys runs the stand-in"},
		{name: "-version", args: []string{"-version"}, msg: "claimsys "},
		{name: "--version", args: []string{"--version"}, msg: "claimsys "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clitest.CheckConfig(t, func(o, e io.Writer) (config, error) { return parseConfig(tc.args, o, e) }, tc.want, tc.code, tc.msg)
		})
	}
}
