package main

import (
	"io"
	"testing"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/clitest"
	"eaimq/internal/retry"
	"eaimq/internal/topo"
)

// TestParseConfig: every flag in its -flag and --flag forms, the checks
// between them, the address, -h and -version, without a broker.
func TestParseConfig(t *testing.T) {
	base := config{url: broker.DefaultURL, vhost: "/", timeout: 10 * time.Second, kind: topo.Classic, archive: topo.DefaultArchiveRetention}
	with := func(f func(*config)) config { c := base; f(&c); return c }
	plan := func(ds ...time.Duration) retry.Plan { return retry.Plan{Delays: ds} }
	for _, tc := range []struct {
		name string
		args []string
		url  string // EAI_AMQP_URL; "" for unset
		want config
		code int    // exit code of the error; 0 with want
		msg  string // the error, or what stdout starts with for -h and -version
	}{
		{name: "defaults", want: base},
		{name: "-check", args: []string{"-check"}, want: with(func(c *config) { c.check = true })},
		{name: "--check", args: []string{"--check"}, want: with(func(c *config) { c.check = true })},
		{name: "-json", args: []string{"-json"}, want: with(func(c *config) { c.json = true })},
		{name: "--json with -check", args: []string{"--json", "-check"}, want: with(func(c *config) { c.json, c.check = true, true })},
		{name: "-timeout", args: []string{"-timeout", "3s"}, want: with(func(c *config) { c.timeout = 3 * time.Second })},
		{name: "--timeout=", args: []string{"--timeout=250ms"}, want: with(func(c *config) { c.timeout = 250 * time.Millisecond })},
		{name: "-timeout 0", args: []string{"-timeout", "0"}, want: with(func(c *config) { c.timeout = 0 })},
		{name: "-timeout bad", args: []string{"-timeout", "soon"}, code: 2},
		{name: "-queue-type quorum", args: []string{"-queue-type", "quorum"}, want: with(func(c *config) { c.kind = topo.Quorum })},
		{name: "--queue-type classic", args: []string{"--queue-type", "classic"}, want: base},
		{name: "-queue-type raft", args: []string{"-queue-type", "raft"}, code: 2,
			msg: `-queue-type: queue type "raft": want classic or quorum`},
		{name: "-migrate quorum", args: []string{"-migrate", "quorum"}, want: with(func(c *config) { c.migrate = topo.Quorum })},
		{name: "--migrate classic", args: []string{"--migrate", "classic"}, want: with(func(c *config) { c.migrate = topo.Classic })},
		{name: "-migrate with the same -queue-type", args: []string{"-queue-type", "quorum", "-migrate", "quorum"},
			want: with(func(c *config) { c.kind, c.migrate = topo.Quorum, topo.Quorum })},
		{name: "-migrate raft", args: []string{"-migrate", "raft"}, code: 2, msg: `-migrate: queue type "raft": want classic or quorum`},
		{name: "-migrate -check", args: []string{"-migrate", "quorum", "-check"}, code: 2,
			msg: "-migrate cannot be combined with -check, -json, -retry-delays or -archive-retention"},
		{name: "-migrate -json", args: []string{"-migrate", "quorum", "-json"}, code: 2,
			msg: "-migrate cannot be combined with -check, -json, -retry-delays or -archive-retention"},
		{name: "-migrate -retry-delays", args: []string{"-migrate", "quorum", "-retry-delays", "1s"}, code: 2,
			msg: "-migrate cannot be combined with -check, -json, -retry-delays or -archive-retention"},
		{name: "-migrate against -queue-type", args: []string{"-queue-type", "classic", "-migrate", "quorum"}, code: 2,
			msg: "-queue-type classic contradicts -migrate quorum"},
		{name: "-retry-delays", args: []string{"-retry-delays", "1s,1m,1s"},
			want: with(func(c *config) { c.plan = plan(time.Second, time.Minute, time.Second) })},
		{name: "--retry-delays=", args: []string{"--retry-delays=10s"}, want: with(func(c *config) { c.plan = plan(10 * time.Second) })},
		{name: "-retry-delays below 1s", args: []string{"-retry-delays", "100ms"}, code: 2,
			msg: `-retry-delays "100ms": comma-separated durations, each whole seconds from 1s to 24h (example: 1s,10s,1m)`},
		{name: "-retry-delays beyond 24h", args: []string{"-retry-delays", "25h"}, code: 2},
		{name: "-archive-retention", args: []string{"-archive-retention", "720h"}, want: with(func(c *config) { c.archive = 720 * time.Hour })},
		{name: "-archive-retention 0", args: []string{"--archive-retention=0"}, want: with(func(c *config) { c.archive = 0 })},
		{name: "-archive-retention below 1m", args: []string{"-archive-retention", "30s"}, code: 2,
			msg: "-archive-retention 30s: want 0 (no archive) or 1m to 1176h"},
		{name: "-archive-retention beyond 49 days", args: []string{"-archive-retention", "1177h"}, code: 2},
		{name: "-migrate -archive-retention", args: []string{"-migrate", "quorum", "-archive-retention", "1h"}, code: 2,
			msg: "-migrate cannot be combined with -check, -json, -retry-delays or -archive-retention"},
		{name: "an argument", args: []string{"extra"}, code: 2, msg: `unexpected argument "extra"`},
		{name: "an argument after a flag", args: []string{"-check", "extra"}, code: 2, msg: `unexpected argument "extra"`},
		{name: "an unknown flag", args: []string{"-bogus"}, code: 2},
		{name: "-h", args: []string{"-h"}, msg: "Topology declares"},
		{name: "--help", args: []string{"--help"}, msg: "Topology declares"},
		{name: "-version", args: []string{"-version"}, msg: "topology "},
		{name: "--version", args: []string{"--version"}, msg: "topology "},
		{name: "a vhost", url: "amqp://u:p@127.0.0.1:5672/claims", want: with(func(c *config) { c.url, c.vhost = "amqp://u:p@127.0.0.1:5672/claims", "claims" })},
		{name: "an unusable address", url: "amqp://guest:guest@127.0.0.1:99999/x", code: 2, msg: "invalid AMQP URL amqp://guest:xxxxx@127.0.0.1:99999/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return map[string]string{broker.EnvURL: tc.url}[k] }
			clitest.CheckConfig(t, func(o, e io.Writer) (config, error) { return parseConfig(tc.args, getenv, o, e) }, tc.want, tc.code, tc.msg)
		})
	}
}
