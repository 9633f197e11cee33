package main

import (
	"io"
	"testing"

	"eaimq/internal/broker"
	"eaimq/internal/clitest"
	"eaimq/internal/nodestatus"
)

// TestParseConfig: every flag in its -flag and --flag forms, the size and
// path checks, the address, -h and -version, without a node.
func TestParseConfig(t *testing.T) {
	base := config{status: nodestatus.Config{OutFile: defaultStatusFile, Want: 512 << 20, URL: broker.DefaultURL}}
	with := func(f func(*config)) config { c := base; f(&c); return c }
	for _, tc := range []struct {
		name string
		args []string
		url  string // EAI_AMQP_URL; "" for unset
		want config
		code int    // exit code of the error; 0 with want
		msg  string // the error, or what stdout starts with for -h and -version
	}{
		{name: "defaults", want: base},
		{name: "-node", args: []string{"-node", "rabbit@elsewhere"}, want: with(func(c *config) { c.node = "rabbit@elsewhere" })},
		{name: "--node=", args: []string{"--node=eaimq1@localhost"}, want: with(func(c *config) { c.node = "eaimq1@localhost" })},
		{name: "-node without a value", args: []string{"-node"}, code: 2},
		{name: "-o", args: []string{"-o", "/tmp/s.txt"}, want: with(func(c *config) { c.status.OutFile = "/tmp/s.txt" })},
		{name: "--o -", args: []string{"--o", "-"}, want: with(func(c *config) { c.status.OutFile = "-" })},
		{name: "-o empty", args: []string{"-o", ""}, code: 2, msg: `-o wants a file path, or "-" for none`},
		{name: "-watermark", args: []string{"-watermark", "1GiB"}, want: with(func(c *config) { c.status.Want = 1 << 30 })},
		{name: "--watermark bytes", args: []string{"--watermark", "536870912"}, want: base},
		{name: "-watermark 1GB", args: []string{"-watermark=1GB"}, want: with(func(c *config) { c.status.Want = 1e9 })},
		{name: "-watermark 0", args: []string{"-watermark", "0"}, code: 2, msg: `-watermark: bad size "0": the watermark must be at least 1 byte`},
		{name: "-watermark unit", args: []string{"-watermark", "512XB"}, code: 2, msg: `-watermark: bad size "512XB": unknown unit "XB"`},
		{name: "-watermark too large", args: []string{"-watermark", "9999999999GiB"}, code: 2, msg: `-watermark: bad size "9999999999GiB": too large`},
		{name: "-json", args: []string{"-json"}, want: with(func(c *config) { c.status.JSON = true })},
		{name: "--json", args: []string{"--json"}, want: with(func(c *config) { c.status.JSON = true })},
		{name: "an argument", args: []string{"-o", "-", "extra"}, code: 2, msg: `unexpected argument "extra"`},
		{name: "an argument before a bad size", args: []string{"-watermark", "0", "extra"}, code: 2, msg: `unexpected argument "extra"`},
		{name: "an unknown flag", args: []string{"-bogus"}, code: 2},
		{name: "-h", args: []string{"-h"}, msg: "Brokerstatus saves"},
		{name: "--help", args: []string{"--help"}, msg: "Brokerstatus saves"},
		{name: "-version", args: []string{"-version"}, msg: "brokerstatus "},
		{name: "--version", args: []string{"--version"}, msg: "brokerstatus "},
		{name: "the address", url: "amqp://u:p@127.0.0.1:5672/claims", want: with(func(c *config) { c.status.URL = "amqp://u:p@127.0.0.1:5672/claims" })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return map[string]string{broker.EnvURL: tc.url}[k] }
			clitest.CheckConfig(t, func(o, e io.Writer) (config, error) { return parseConfig(tc.args, getenv, o, e) }, tc.want, tc.code, tc.msg)
		})
	}
}
