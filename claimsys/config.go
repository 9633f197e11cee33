package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"eaimq/internal/claimsys"
	"eaimq/internal/cli"
)

// config is what the flags ask for, checked.
type config struct {
	addr  string
	delay time.Duration
	force int // 0: the fixture's rules
	flap  bool
	draft bool // enforce the Idempotency-Key draft
	stats bool // print the counts of the claimsys at addr instead of serving
	json  bool // with stats: the body of GET /_stats as it came
}

// parseConfig reads the flags in args and checks every value the flag
// package lets through. It listens on nothing: every mistake it finds is
// a usage error (exit 2). -h and -version print on stdout and return
// flag.ErrHelp; the flag package's own messages go to stderr.
func parseConfig(args []string, stdout, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("claimsys", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.StringVar(&c.addr, "addr", "127.0.0.1:9202", "listen `address`")
	fs.DurationVar(&c.delay, "delay", 0, "`delay` before answering each claim")
	fs.IntVar(&c.force, "force-status", 0, "answer every claim with this `status` (0: the fixture's rules)")
	fs.BoolVar(&c.flap, "flap", false, "alternate 503 and 201 on every call")
	fs.BoolVar(&c.draft, "idempotency-draft", false, "enforce the Idempotency-Key draft: another payload under a used key 422, a key in progress 409")
	fs.BoolVar(&c.stats, "stats", false, "print the counts of the claimsys running at -addr, and exit")
	fs.BoolVar(&c.json, "json", false, "with -stats: print GET /_stats as it came, JSON")
	if err := cli.Flags(fs, doc, args, stdout); err != nil {
		return config{}, err
	}
	if err := checkFlags(fs, c); err != nil {
		return config{}, cli.Usagef("%v", err)
	}
	if c.json && !c.stats {
		return config{}, cli.Usagef("-json goes with -stats")
	}
	return c, nil
}

// checkFlags checks the values the flag package lets through: an argument
// left over, and every number against its range.
func checkFlags(fs *flag.FlagSet, c config) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if _, port, err := net.SplitHostPort(c.addr); err != nil {
		return fmt.Errorf("-addr %q: want host:port (127.0.0.1:9202): %v", c.addr, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("-addr %q: the port must be a number, 0 to 65535", c.addr)
	}
	if c.delay < 0 || c.delay > claimsys.MaxDelay {
		return fmt.Errorf("-delay %s: want 0 to %s", c.delay, claimsys.MaxDelay)
	}
	if c.force != 0 && !claimsys.ValidStatus(c.force) {
		return fmt.Errorf("-force-status %d: want 0 (the fixture's rules) or an HTTP status 200 to 599", c.force)
	}
	return nil
}
