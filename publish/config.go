package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/fail"
	"eaimq/internal/publish"
	"eaimq/internal/trace"
)

// Ranges of the numeric flags. Past a point a wider window adds no
// throughput (BenchmarkPublishVsBare; docs/figures.md) and costs memory
// per slot; -max-bytes follows RabbitMQ's largest message (publish.MaxMaxBytes);
// a confirm or a connection that takes more than an hour is a failure to
// report, not to wait for.
const (
	maxWindow   = 10000
	maxMaxBytes = publish.MaxMaxBytes
	minTimeout  = 100 * time.Millisecond
	maxTimeout  = time.Hour
)

// config is one run of publish, as its flags and environment ask.
type config struct {
	publish publish.Config
	json    bool // the summary as one JSON object
}

// parseConfig reads the flags and the environment; -h and -version print
// on stdout and return flag.ErrHelp, a flag the flag package refuses is
// said on stderr. It connects to nothing and opens no file.
func parseConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	p := &c.publish
	var progress string
	fs.IntVar(&p.Window, "window", 256, fmt.Sprintf("`n` confirms outstanding at once, 1 to %d", maxWindow))
	fs.DurationVar(&p.Timeout, "timeout", 10*time.Second, fmt.Sprintf("longest `wait` for a confirm and for the connection, %s to %s", minTimeout, maxTimeout))
	fs.Int64Var(&p.MaxBytes, "max-bytes", publish.DefaultMaxBytes, fmt.Sprintf("largest claim file accepted, in `bytes`, 1 to %d (128 MiB, RabbitMQ 3.x's default limit)", maxMaxBytes))
	fs.BoolVar(&p.KeepGoing, "keep-going", false, "publish the valid files even if some are invalid")
	fs.StringVar(&progress, "progress", "auto", "progress on stderr: `mode` auto (terminal only), always, never")
	fs.BoolVar(&c.json, "json", false, "print the summary as one JSON object")
	if err := cli.Flags(fs, doc, args, stdout); err != nil {
		return config{}, err
	}
	switch {
	case fs.NArg() == 0:
		return config{}, cli.Usagef("no claim file given")
	case p.Window < 1 || p.Window > maxWindow:
		return config{}, cli.Usagef("-window %d is out of range: 1 to %d", p.Window, maxWindow)
	case p.Timeout < minTimeout || p.Timeout > maxTimeout:
		return config{}, cli.Usagef("-timeout %s is out of range: %s to %s", p.Timeout, minTimeout, maxTimeout)
	case p.MaxBytes < 1 || p.MaxBytes > maxMaxBytes:
		return config{}, cli.Usagef("-max-bytes %d is out of range: 1 to %d (128 MiB, RabbitMQ 3.x's default largest message)", p.MaxBytes, maxMaxBytes)
	case progress != "auto" && progress != "always" && progress != "never":
		return config{}, cli.Usagef("-progress must be auto, always or never")
	}
	p.Progress = publish.ProgressMode(progress)
	var err error
	if p.Headers, err = trace.Headers(getenv(trace.Env)); err != nil {
		return config{}, fail.New(fail.Usage, err)
	}
	if n := strings.Count(strings.Join(fs.Args(), "\x00")+"\x00", "-\x00"); n > 1 {
		return config{}, cli.Usagef("standard input (-) can be given once")
	}
	p.Files = fs.Args()
	p.URL = broker.URL(getenv)
	p.Getenv = getenv
	return c, nil
}
