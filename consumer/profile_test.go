package main

import (
	"bufio"
	"bytes"
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

func mustPlan(t *testing.T, s string) *retry.Plan {
	t.Helper()
	p, err := retry.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

// TestProfiles: --profile production sets what its table says, each flag
// given on the command line keeps its own value (false and "" included),
// EAIMQ_RETRY_DELAYS is --retry-delays when the flag is not given, in
// either profile, and --profile lab is the defaults.
func TestProfiles(t *testing.T) {
	base := relay.Config{
		URL: broker.DefaultURL, Claims: "http://x/v1/claims", Prefetch: 5, HTTPTimeout: 10 * time.Second,
		Accept: relay.AcceptSet{201}, Store: store.DefaultPath, Sync: "full", PauseAfter: 3, UnreadyAfter: 5, StoreWait: 10 * time.Minute,
	}
	prod := base
	prod.Retry, prod.PauseWhenDown, prod.MetricsAddr, prod.LogJSON = mustPlan(t, productionDelays), true, "127.0.0.1:9464", true
	prod.NoCreateStore = true
	with := func(c relay.Config, f func(*relay.Config)) relay.Config { f(&c); return c }
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want relay.Config
	}{
		{"lab", []string{"--profile", "lab"}, nil, base},
		{"production", []string{"--profile", "production"}, nil, prod},
		{"production, flags given win", []string{"-profile=production", "--metrics-addr", "127.0.0.1:9500", "--log-format", "text",
			"--pause-when-down=false", "--retry-delays", "1s,5s"}, nil,
			with(prod, func(c *relay.Config) {
				c.MetricsAddr, c.LogJSON, c.PauseWhenDown, c.Retry = "127.0.0.1:9500", false, false, mustPlan(t, "1s,5s")
			})},
		{"production without delayed retries", []string{"--profile", "production", "--retry-delays", ""}, nil,
			with(prod, func(c *relay.Config) { c.Retry = nil })},
		{"production, EAIMQ_RETRY_DELAYS", []string{"--profile", "production"}, map[string]string{envRetryDelays: "1m,5m"},
			with(prod, func(c *relay.Config) { c.Retry = mustPlan(t, "1m,5m") })},
		{"lab, EAIMQ_RETRY_DELAYS", nil, map[string]string{envRetryDelays: "1m,5m"},
			with(base, func(c *relay.Config) { c.Retry = mustPlan(t, "1m,5m") })},
		{"the flag beats EAIMQ_RETRY_DELAYS", []string{"--retry-delays", "10s"}, map[string]string{envRetryDelays: "1m,5m"},
			with(base, func(c *relay.Config) { c.Retry = mustPlan(t, "10s") })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			got, err := parseConfig(append([]string{"--claim", "http://x"}, tc.args...), func(k string) string { return tc.env[k] }, &out, &errb)
			if err != nil || out.Len()+errb.Len() != 0 {
				t.Fatalf("%v; stdout %q stderr %q", err, out.String(), errb.String())
			}
			got.relay.Getenv = nil
			if !reflect.DeepEqual(got.relay, tc.want) {
				t.Errorf("\n got %+v\nwant %+v", got.relay, tc.want)
			}
		})
	}
}

// unitLines reads a systemd file's settings (unit or environment file):
// key and value of each line that is not a comment or a section.
func unitLines(t *testing.T, path string) [][2]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][2]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "[") {
			out = append(out, [2]string{k, strings.Trim(v, `"`)})
		}
	}
	return out
}

// TestServiceExample: the unit's ExecStart, expanded by systemd's rules
// (${X} one argument, $X split at spaces) with the unit's Environment= and
// the example environment file, is the production profile, with the
// delays the profile defines; and the unit's stop timeout outlasts the
// longest partner call it allows, so that a stop drains.
func TestServiceExample(t *testing.T) {
	dir := filepath.Join("..", "deploy", "systemd")
	env := map[string]string{}
	var execStart string
	var stopTimeout time.Duration
	for _, kv := range unitLines(t, filepath.Join(dir, "eaimq-consumer@.service")) {
		switch kv[0] {
		case "Environment":
			k, v, _ := strings.Cut(kv[1], "=")
			env[k] = strings.NewReplacer("%S", "/var/lib", "%i", "partner-a").Replace(v)
		case "ExecStart":
			execStart = kv[1]
		case "TimeoutStopSec":
			d, err := time.ParseDuration(kv[1])
			if err != nil {
				t.Fatalf("TimeoutStopSec=%s: %v", kv[1], err)
			}
			stopTimeout = d
		}
	}
	for _, kv := range unitLines(t, filepath.Join(dir, "consumer.env.example")) {
		env[kv[0]] = kv[1]
	}
	if env[envRetryDelays] != productionDelays {
		t.Errorf("consumer.env.example: %s=%s, the production profile's are %s", envRetryDelays, env[envRetryDelays], productionDelays)
	}
	var args []string
	for _, w := range strings.Fields(execStart)[1:] {
		switch {
		case strings.HasPrefix(w, "${"):
			args = append(args, env[strings.Trim(w, "${}")])
		case strings.HasPrefix(w, "$"):
			args = append(args, strings.Fields(env[w[1:]])...)
		default:
			args = append(args, w)
		}
	}
	var out, errb bytes.Buffer
	got, err := parseConfig(args, func(k string) string { return env[k] }, &out, &errb)
	if err != nil {
		t.Fatalf("%q: %v %s", args, err, errb.String())
	}
	c := got.relay
	if c.Retry == nil || c.Retry.String() != productionDelays || !c.PauseWhenDown || c.MetricsAddr == "" || !c.LogJSON || !c.NoCreateStore ||
		c.Store != "/var/lib/eaimq/partner-a.db" || c.Claims != "https://claims.partner-a.example/v1/claims" {
		t.Errorf("%q gives %+v", args, c)
	}
	if stopTimeout <= c.HTTPTimeout+10*time.Second {
		t.Errorf("TimeoutStopSec %s does not outlast --http-timeout %s and a delayed copy's confirm (10s)", stopTimeout, c.HTTPTimeout)
	}
}

// TestProfileInManual: the manual lists each setting of the production
// profile as the table has it, so that -h cannot tell another story.
func TestProfileInManual(t *testing.T) {
	manual := cli.Manual(doc)
	for _, kv := range profiles["production"] {
		want := "--" + kv[0] + " " + kv[1]
		switch kv[1] {
		case "true":
			want = "--" + kv[0]
		case "false":
			want = "--" + kv[0] + "=false" // a boolean flag's only spelling of false
		}
		if !strings.Contains(manual, "\t"+want) {
			t.Errorf("the manual's production profile lacks %q", want)
		}
	}
}
