package main

import (
	"flag"
	"io"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/fail"
	"eaimq/internal/retry"
	"eaimq/internal/topo"
)

// config is what the flags and EAI_AMQP_URL ask for, checked.
type config struct {
	url     string // EAI_AMQP_URL, or the default
	vhost   string // the vhost url names
	timeout time.Duration
	check   bool
	strict  bool // -check: the pre-upgrade findings exit 1
	json    bool
	kind    topo.QueueType // -queue-type
	migrate topo.QueueType // -migrate; "" when not asked
	plan    retry.Plan     // -retry-delays
	// archive is -archive-retention: how long claim.dead.archive keeps a
	// purged dead letter; 0: no archive is declared (nor checked).
	archive time.Duration
}

// maxArchive bounds -archive-retention: 49 days, under the 2^32-1 ms
// that is the largest x-message-ttl RabbitMQ takes.
const maxArchive = 1176 * time.Hour

// parseConfig reads the flags in args and the broker address from getenv.
// It dials nothing: every mistake it finds is a usage error (exit 2),
// found before any connection. -h and -version print on stdout and return
// flag.ErrHelp; the flag package's own messages go to stderr.
func parseConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("topology", flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := fs.Bool("check", false, "verify the topology and change nothing")
	strict := fs.Bool("strict", false, "with -check: exit 1 when the pre-upgrade check (RabbitMQ 4.x) finds anything")
	timeout := fs.Duration("timeout", 10*time.Second, "connection `timeout`")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	queueType := fs.String("queue-type", string(topo.Classic), "`type` of claim.in and claim.dead: classic or quorum")
	migrate := fs.String("migrate", "", "move claim.in and claim.dead, claims and all, to queue `type` classic or quorum")
	archive := fs.Duration("archive-retention", topo.DefaultArchiveRetention, "claim.dead.archive keeps a purged dead letter for `d` (dlq restore): 0 (no archive) or 1m to 1176h")
	retryDelays := fs.String("retry-delays", "", "also declare the consumer's delay queues for `delays` such as 1s,10s,1m (consumer --retry-delays)")
	if err := cli.Flags(fs, doc, args, stdout); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	c := config{timeout: *timeout, check: *check, strict: *strict, json: *asJSON, archive: *archive}
	if c.archive != 0 && (c.archive < time.Minute || c.archive > maxArchive) {
		return config{}, cli.Usagef("-archive-retention %v: want 0 (no archive) or 1m to 1176h", c.archive)
	}
	if c.strict && !c.check {
		return config{}, cli.Usagef("-strict goes with -check")
	}
	var err error
	if c.kind, err = topo.ParseQueueType(*queueType); err != nil {
		return config{}, cli.Usagef("-queue-type: %v", err)
	}
	if *retryDelays != "" {
		if c.plan, err = retry.Parse(*retryDelays); err != nil {
			return config{}, fail.New(fail.Usage, err)
		}
	}
	if *migrate != "" {
		if c.migrate, err = topo.ParseQueueType(*migrate); err != nil {
			return config{}, cli.Usagef("-migrate: %v", err)
		}
		if *check || *asJSON || *retryDelays != "" || flagSet(fs, "archive-retention") {
			return config{}, cli.Usagef("-migrate cannot be combined with -check, -json, -retry-delays or -archive-retention")
		}
		if flagSet(fs, "queue-type") && c.kind != c.migrate {
			return config{}, cli.Usagef("-queue-type %s contradicts -migrate %s", c.kind, c.migrate)
		}
	}
	c.url = broker.URL(getenv)
	if c.vhost, err = broker.VHost(c.url); err != nil {
		return config{}, err // exit 2: the URL is an argument
	}
	return c, nil
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
