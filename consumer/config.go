package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/fail"
	"eaimq/internal/redact"
	"eaimq/internal/relay"
	"eaimq/internal/retry"
	"eaimq/internal/store"
)

// maxRunSeconds bounds --max-seconds (a year): far beyond any run, and far
// below the overflow of a time.Duration.
const maxRunSeconds = 365 * 24 * 3600

// envRetryDelays is --retry-delays when the flag is not given: the line of
// a service's environment file that topology -retry-delays is run with
// too (docs/operations.md), so that the consumer and its delay queues
// cannot be told two lists.
const envRetryDelays = "EAIMQ_RETRY_DELAYS"

// productionDelays outlast a partner that answers 503 for an hour: the
// fifth retry comes 1h42m after the first failure. (A partner that does
// not answer at all pauses the consumer instead: no retry is spent.)
const productionDelays = "30s,2m,10m,30m,1h"

// profiles are the settings --profile names: flags and the values it gives
// them. A flag on the command line, and EAIMQ_RETRY_DELAYS for
// --retry-delays, keep their own value. The lab's profile changes nothing.
var profiles = map[string][][2]string{
	"lab": nil,
	"production": {
		{"retry-delays", productionDelays},
		{"pause-when-down", "true"},
		{"metrics-addr", "127.0.0.1:9464"},
		{"log-format", "json"},
		{"create-store", "false"},
	},
}

// config is what the flags and the environment ask of this run, checked:
// the relay's Config (all but its logger, which writes to stderr, in the
// format relay.LogJSON says), and the logger's level.
type config struct {
	relay relay.Config
	level slog.Level
	// initStore: create the store (--init-store) and exit, consuming
	// nothing.
	initStore bool
}

// flags are the consumer's flags as the flag package fills them in.
type flags struct {
	claim, sync, accept, retryDelays, retain *string
	logLevel, logFormat, metricsAddr         *string
	metricsToken                             *string
	maxSeconds                               *float64
	prefetch, pauseAfter, unreadyAfter       *int
	httpTimeout, storeWait, stallAfter       *time.Duration
	json, pauseWhenDown                      *bool
	createStore, initStore                   *bool
	failOnDead                               *float64 // nil unless given
}

func defineFlags(fs *flag.FlagSet) *flags {
	f := &flags{
		claim:         fs.String("claim", "", "claim system `URL` (POSTs go to URL/v1/claims)"),
		maxSeconds:    fs.Float64("max-seconds", 0, "run for `seconds`, then drain and exit (0: until a signal)"),
		prefetch:      fs.Int("prefetch", 5, "`n` deliveries unacked and in flight at once (basic.qos)"),
		httpTimeout:   fs.Duration("http-timeout", 10*time.Second, "longest partner call (`duration`)"),
		sync:          fs.String("sync", "full", "durability of a record before its ack: `mode` full (survives power loss) or normal (survives a crash)"),
		accept:        fs.String("accept-status", "201", "comma-separated 2xx `statuses` that mean delivered (only 201 unless the partner documents more)"),
		logLevel:      fs.String("log-level", "info", "`level`: debug, info, warn, error"),
		json:          fs.Bool("json", false, "print the summary as one JSON object"),
		retryDelays:   fs.String("retry-delays", "", "retry a transient failure after each of `delays` such as 1s,10s,1m (one retry each) in delay queues, instead of requeueing once; needs topology -retry-delays"),
		pauseWhenDown: fs.Bool("pause-when-down", false, "stop taking claims while the claim system does not answer, probe it, and resume when it does"),
		pauseAfter:    fs.Int("pause-after", 3, "with --pause-when-down: pause after `n` calls in a row without an answer"),
	}
	fs.Func("fail-on-dead", "exit 1 when more than `percent` of the claims this run settled were dead-lettered (0 to 100)", func(v string) error {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil || !(p >= 0 && p <= 100) {
			return errors.New("want a percentage from 0 to 100")
		}
		f.failOnDead = &p
		return nil
	})
	f.metricsAddr = fs.String("metrics-addr", "", "serve Prometheus /metrics, /healthz and /readyz on `host:port` (such as 127.0.0.1:9464)")
	f.metricsToken = fs.String("metrics-token-file", "", "with --metrics-addr: /metrics answers only requests with \"Authorization: Bearer\" and the token in `file` (owner-only, at least 16 characters)")
	f.logFormat = fs.String("log-format", "text", "log `format` on stderr: text or json")
	f.retain = fs.String("retain", "", "prune the records of claims delivered longer ago than `age` (90d, 36h; default: keep them)")
	f.storeWait = fs.Duration("store-wait", 10*time.Minute, "wait out a dedup store that does not answer (a database restarting, a full disk) for at most `duration`, holding claims back, before exiting 74 (0: exit at the first failure)")
	f.stallAfter = fs.Duration("stall-after", 0, "give up a connection that got no delivery for `duration` with a prefetch slot free, when claim.in holds ready claims or the node makes no queue within it (its node cut off from its cluster), and connect to the next address of EAI_AMQP_URL (0: never)")
	f.unreadyAfter = fs.Int("unready-after", 5, "/readyz answers 503 after `n` partner calls in a row that failed (paused or not)")
	f.createStore = fs.Bool("create-store", true, "create the dedup store (and its directory) when it is not there; false: exit 78 instead (the production profile's)")
	f.initStore = fs.Bool("init-store", false, "create the dedup store if it is not there, say what was done, and exit: a deployment's first step (--claim not needed)")
	fs.String("profile", "lab", "`name`: lab (the defaults) or production (delayed retries, --pause-when-down, metrics, JSON logs, --create-store=false)")
	return f
}

// parseConfig reads args and the environment (getenv) into a config. It
// touches no broker and no file: -h and -version write to stdout, a flag
// mistake to stderr, and every mistake is an error that maps to exit 2.
func parseConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("consumer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := defineFlags(fs)
	if err := cli.Flags(fs, doc, args, stdout); err != nil {
		return config{}, err
	}
	if err := applyProfile(fs, getenv); err != nil {
		return config{}, err
	}
	var level slog.Level
	switch {
	case fs.NArg() > 0:
		return config{}, cli.Usagef("unexpected argument %q", fs.Arg(0))
	case *f.claim == "" && !*f.initStore:
		return config{}, cli.Usagef("--claim URL is required")
	case !(*f.maxSeconds >= 0 && *f.maxSeconds <= maxRunSeconds): // NaN fails both
		return config{}, cli.Usagef("--max-seconds must be a number from 0 to %d (0: until a signal), not %v", maxRunSeconds, *f.maxSeconds)
	case *f.prefetch < 1 || *f.prefetch > 65535:
		return config{}, cli.Usagef("--prefetch must be between 1 and 65535")
	case *f.httpTimeout < time.Millisecond || *f.httpTimeout > time.Hour:
		return config{}, cli.Usagef("--http-timeout must be from 1ms to 1h, not %s", *f.httpTimeout)
	case level.UnmarshalText([]byte(*f.logLevel)) != nil:
		return config{}, cli.Usagef("--log-level must be debug, info, warn or error")
	case *f.logFormat != "text" && *f.logFormat != "json":
		return config{}, cli.Usagef("--log-format must be text or json, not %q", *f.logFormat)
	case *f.pauseAfter < 1 || *f.pauseAfter > 1000:
		return config{}, cli.Usagef("--pause-after must be from 1 to 1000")
	case *f.storeWait < 0 || *f.storeWait > 24*time.Hour:
		return config{}, cli.Usagef("--store-wait must be from 0 to 24h, not %s", *f.storeWait)
	case *f.stallAfter != 0 && (*f.stallAfter < 2*time.Second || *f.stallAfter > time.Hour):
		return config{}, cli.Usagef("--stall-after must be 0 (never) or from 2s to 1h, not %s", *f.stallAfter)
	case *f.unreadyAfter < 1 || *f.unreadyAfter > 1000:
		return config{}, cli.Usagef("--unready-after must be from 1 to 1000")
	case *f.metricsToken != "" && *f.metricsAddr == "":
		return config{}, cli.Usagef("--metrics-token-file needs --metrics-addr (or --profile production): there is no /metrics to protect")
	}
	rc, err := f.relayConfig(getenv)
	rc.LogJSON = *f.logFormat == "json"
	return config{relay: rc, level: level, initStore: *f.initStore}, err
}

// applyProfile gives the flags not on the command line the values of
// --profile, and --retry-delays EAIMQ_RETRY_DELAYS's first.
func applyProfile(fs *flag.FlagSet, getenv func(string) string) error {
	name := fs.Lookup("profile").Value.String()
	settings, ok := profiles[name]
	if !ok {
		return cli.Usagef("--profile must be lab or production, not %q", name)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if v := getenv(envRetryDelays); v != "" && !given["retry-delays"] {
		if _, err := retry.Parse(v); err != nil {
			return fail.Errorf(fail.Usage, "%s: %w", envRetryDelays, err)
		}
		fs.Set("retry-delays", v)
		given["retry-delays"] = true
	}
	for _, kv := range settings {
		if !given[kv[0]] {
			fs.Set(kv[0], kv[1]) // the table's values parse: TestProfiles
		}
	}
	return nil
}

// relayConfig reads the flags whose values take parsing, in the order a
// mistake is reported, and the broker's address.
func (f *flags) relayConfig(getenv func(string) string) (relay.Config, error) {
	var plan *retry.Plan
	if *f.retryDelays != "" {
		p, err := retry.Parse(*f.retryDelays)
		if err != nil {
			return relay.Config{}, fail.New(fail.Usage, err)
		}
		plan = &p
	}
	keep, err := store.ParseAge(*f.retain)
	if err != nil {
		return relay.Config{}, cli.Usagef("--retain %v", err)
	}
	mode := strings.ToLower(*f.sync)
	if mode != "full" && mode != "normal" {
		return relay.Config{}, cli.Usagef("--sync must be full or normal, not %q", *f.sync)
	}
	accept, err := parseAccept(*f.accept)
	if err != nil {
		return relay.Config{}, fail.New(fail.Usage, err)
	}
	var endpoint string
	if *f.claim != "" || !*f.initStore { // --init-store calls no one
		if endpoint, err = claimsURL(*f.claim); err != nil {
			return relay.Config{}, fail.New(fail.Usage, err)
		}
	}
	maxRun := time.Duration(*f.maxSeconds * float64(time.Second))
	if *f.maxSeconds > 0 && maxRun == 0 {
		maxRun = 1 // below a nanosecond is still a deadline, and it has passed
	}
	amqpURL := broker.URL(getenv)
	if _, err := broker.VHost(amqpURL); err != nil {
		return relay.Config{}, fail.Errorf(fail.Usage, "%s: %w", broker.EnvURL, err)
	}
	return relay.Config{
		URL: amqpURL, Getenv: getenv, Claims: endpoint,
		Prefetch: *f.prefetch, HTTPTimeout: *f.httpTimeout, Accept: accept,
		Store: store.Path(getenv), Sync: mode, StoreWait: *f.storeWait, StallAfter: *f.stallAfter, NoCreateStore: !*f.createStore,
		MaxRun: maxRun, Retry: plan, PauseWhenDown: *f.pauseWhenDown, PauseAfter: *f.pauseAfter, UnreadyAfter: *f.unreadyAfter,
		MetricsAddr: *f.metricsAddr, MetricsTokenFile: *f.metricsToken, Retain: keep, JSON: *f.json, FailOnDead: f.failOnDead,
	}, nil
}

// parseAccept reads --accept-status: 2xx codes, comma-separated.
func parseAccept(v string) (relay.AcceptSet, error) {
	var out relay.AcceptSet
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 200 || n > 299 {
			return nil, fmt.Errorf("--accept-status %q: a comma-separated list of 2xx statuses, such as 201,202", v)
		}
		if !out.Has(n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// claimsURL makes <base>/v1/claims from the --claim value, with or without a
// trailing slash, and accepts a value that already ends in /v1/claims.
func claimsURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return "", fmt.Errorf("--claim %s is not an http(s) URL with a host (example: http://127.0.0.1:9202)", redact.URL(base))
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("--claim %s: port %s is not from 1 to 65535", redact.URL(base), p)
		}
	}
	u.Path = strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(u.Path, "/v1/claims") {
		u.Path += "/v1/claims"
	}
	u.RawPath = ""
	return u.String(), nil
}
