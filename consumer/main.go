package main

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"eaimq/internal/cli"
	"eaimq/internal/fail"
	"eaimq/internal/relay"
	"eaimq/internal/store"
)

// doc is the manual: -h prints its package comment, so that the manual and
// the package documentation are one text.
//
//go:embed doc.go
var doc string

// signalled is the cause of the first signal's cancel: which signal came.
type signalled struct{ os.Signal }

func (s signalled) Error() string { return s.String() }

func main() {
	// The first signal ends the run gracefully (soft); the second abandons
	// it (hard). run takes both so that tests can drive each. The soft
	// cancel carries the signal, for the note the run writes in its log.
	hard, cancelHard := context.WithCancel(context.Background())
	soft, cancelSoft := context.WithCancelCause(hard)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		cancelSoft(signalled{<-sigs})
		<-sigs
		cancelHard()
	}()
	err := run(soft, hard, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	cli.Report(os.Stderr, "consumer", err)
	os.Exit(cli.Code(err))
}

func run(soft, hard context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runHooked(relay.Hooks{}, soft, hard, args, getenv, stdout, stderr)
}

// runHooked is run with hooks into a delivery's way, for tests.
//
// With --log-format json every line on stderr is one JSON object: the
// log's, the note of the first signal, and the error the run ends with,
// which is then reported here (and marked shown, so main does not print
// it again). A mistake in the flags is too, when the arguments ask for
// JSON: the flag package's message is held and written as a log line.
func runHooked(hooks relay.Hooks, soft, hard context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var flagErrs bytes.Buffer
	cfg, err := parseConfig(args, getenv, stdout, &flagErrs)
	if err != nil {
		if cli.Code(err) == cli.ExitOK || !wantsJSON(args) { // -h, -version, or text
			io.Copy(stderr, &flagErrs)
			return err
		}
		return cli.ReportLog(newLogger(stderr, slog.LevelInfo, true), "consumer", flagErrs.String(), err)
	}
	if cfg.initStore {
		return initStore(cfg.relay, stdout)
	}
	log := newLogger(stderr, cfg.level, cfg.relay.LogJSON)
	cfg.relay.Log = log
	cfg.relay.Hooks = hooks
	// The note of the first signal, in the log's format: the run goes on
	// for a while (the calls in flight finish), and an operator should
	// see why it stops taking claims.
	stopNote := context.AfterFunc(soft, func() {
		var s signalled
		if hard.Err() != nil || !errors.As(context.Cause(soft), &s) {
			return // a forced exit says so itself; a test's cancel is no signal
		}
		if cfg.relay.LogJSON {
			log.Info("finishing the claims in flight (a second signal exits at once)", "signal", s.String())
		} else {
			fmt.Fprintf(stderr, "consumer: %v: finishing the claims in flight (again to exit at once)\n", s)
		}
	})
	defer stopNote()
	err = relay.Run(soft, hard, cfg.relay, stdout, stderr)
	if err != nil && cfg.relay.LogJSON {
		return cli.ReportLog(log, "consumer", "", err)
	}
	return err
}

// initStore is --init-store: a deployment's explicit first step, since
// the production profile creates no store (a typo in EAI_MQ_DB would
// otherwise start an empty one). It creates the store where it is not
// there (the SQLite file, 0600, and its directory; the tables in an empty
// PostgreSQL database), opens it where it is (migrating an older schema,
// as a consumer would), says which in one line on stdout, and exits 0:
// running it twice is safe.
func initStore(rc relay.Config, stdout io.Writer) error {
	st, err := store.Open(rc.Store, store.Options{Synchronous: rc.Sync, Conns: rc.Prefetch})
	if err != nil {
		return fail.New(fail.IO, err) // the class store.Open chose, or IO
	}
	if what := st.Created(); what != "" {
		fmt.Fprintf(stdout, "consumer: created the dedup store: %s\n", what)
	} else {
		where := st.Path()
		if abs, err := filepath.Abs(where); err == nil && !store.IsPostgres(rc.Store) {
			where = abs
		}
		fmt.Fprintf(stdout, "consumer: the dedup store %s is there already: nothing created\n", where)
	}
	return fail.New(fail.IO, st.Close())
}

// wantsJSON says whether args ask for JSON logs (--log-format json, or a
// --profile that sets it), read without the flag package: args did not
// parse, or failed a check after.
func wantsJSON(args []string) bool {
	given := map[string]string{}
	for i, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !hasValue && i+1 < len(args) {
			value = args[i+1]
		}
		if strings.HasPrefix(a, "-") && (name == "log-format" || name == "profile") {
			given[name] = value
		}
	}
	if f, ok := given["log-format"]; ok {
		return f == "json"
	}
	for _, kv := range profiles[given["profile"]] {
		if kv[0] == "log-format" {
			return kv[1] == "json"
		}
	}
	return false
}

// newLogger is the log on stderr. In JSON, a duration is a number of
// seconds under its key with _s added ("latency_s":0.012): the handler
// would print nanoseconds, and a reader should not have to know that.
// Text keeps Go's notation (latency=12ms), which people read.
func newLogger(stderr io.Writer, level slog.Level, json bool) *slog.Logger {
	if !json {
		return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	}
	return slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: seconds}))
}

func seconds(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key+"_s", a.Value.Duration().Seconds())
	}
	return a
}
