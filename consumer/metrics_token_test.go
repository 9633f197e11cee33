package main

import (
	"bytes"
	"strings"
	"testing"

	"eaimq/internal/cli"
)

// TestMetricsTokenFileFlag: --metrics-token-file reaches the relay's
// Config with --metrics-addr or the production profile (which sets it),
// in either dash form; alone it is a usage error naming what it needs.
// Parsing does not read the file (the relay does, at start: a bad one is
// a configuration error, exit 78, tested in internal/metrics).
func TestMetricsTokenFileFlag(t *testing.T) {
	const file = "/etc/eaimq/metrics.token" // not read here
	for _, args := range [][]string{
		{"--claim", "http://x", "--metrics-addr", "127.0.0.1:9464", "--metrics-token-file", file},
		{"-claim", "http://x", "-metrics-token-file", file, "-metrics-addr", "0.0.0.0:9464"},
		{"--claim", "http://x", "--profile", "production", "--metrics-token-file", file},
	} {
		var out, errb bytes.Buffer
		cfg, err := parseConfig(args, func(string) string { return "" }, &out, &errb)
		if err != nil || cfg.relay.MetricsTokenFile != file || cfg.relay.MetricsAddr == "" {
			t.Errorf("%q: %v, token file %q, addr %q", args, err, cfg.relay.MetricsTokenFile, cfg.relay.MetricsAddr)
		}
	}
	var out, errb bytes.Buffer
	cfg, err := parseConfig([]string{"--claim", "http://x"}, func(string) string { return "" }, &out, &errb)
	if err != nil || cfg.relay.MetricsTokenFile != "" {
		t.Errorf("without the flag: %v, token file %q", err, cfg.relay.MetricsTokenFile)
	}
	_, err = parseConfig([]string{"--claim", "http://x", "--metrics-token-file", file}, func(string) string { return "" }, &out, &errb)
	cli.Report(&errb, "consumer", err)
	if cli.Code(err) != cli.ExitUsage || !strings.Contains(errb.String(), "--metrics-token-file needs --metrics-addr") {
		t.Errorf("without --metrics-addr: exit %d, stderr %q", cli.Code(err), errb.String())
	}
}
