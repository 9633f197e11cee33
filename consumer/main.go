// Consumer moves claims from RabbitMQ's claim.in to the partner's claim
// system so that none is lost and none is processed twice.
//
// It is the drop-in for the lab's consumer.py and takes the same arguments:
//
//	consumer --claim URL --max-seconds N [--prefetch P]
//
// Each delivery's body is POSTed unchanged to URL/v1/claims (a trailing slash
// or a URL already ending in /v1/claims works too) with its content type
// and an Idempotency-Key header equal to the message_id. Deliveries are
// acked manually, never automatically, and only after their outcome is
// recorded:
//
//	partner answer        what the consumer does
//	201                   record the message_id as processed, then ack
//	                      (only 201 means delivered; --accept-status widens it)
//	another 2xx           reject(requeue=false): dead-lettered, reason
//	                      "unexpected 200: not a creation" (a proxy's or a
//	                      health page's 200 is never recorded as delivered)
//	422 and other 4xx     reject(requeue=false): dead-lettered via eai.dlx
//	  (not 408, 429)      to claim.dead; requeueing would loop forever
//	5xx, 408, 429,        transient: nack(requeue=true) once; when the
//	no answer (refused,   redelivered copy fails again, reject(requeue=false)
//	reset, timeout)
//	1xx, 3xx              unexpected: the transient rule, so never a loop
//
// Before every reject it checks that the dead-letter route (eai.dlx, the
// binding, claim.dead) exists, since the broker drops a rejected message in
// silence when it does not. If claim.dead was deleted, nothing is rejected:
// the consumer stops with exit 78, the claim stays in claim.in with its
// decision on record, and after topology runs again the redelivered copy is
// dead-lettered without another call. A redelivered copy whose dead-letter
// decision is on record (the reject was lost with a connection) is likewise
// rejected again without a call.
//
// A claim that cannot be sent (its message_id or content type is not a
// valid HTTP header value) is dead-lettered at once with the reason
// "unsendable", without a call and without using its retry.
//
// "Fails again" needs both signals: the delivery is redelivered AND an
// earlier failure of this copy is on record. A copy redelivered because a
// consumer died before calling the partner keeps its retry; a fresh copy
// (not redelivered) is a first delivery even if older copies failed.
//
// Dedup: processed message_ids live in SQLite (EAI_MQ_DB). A delivery whose
// id is recorded is acked without calling the partner, across restarts. The
// lab's own processed.db (consumer.py's processed table) is adopted: every
// message_id in it counts as delivered. EAI_MQ_DB may be a symbolic link;
// a device or a directory is refused. Two
// copies of one id in flight at once (in this process, or in two consumers
// sharing the file) never reach the partner together: the second waits for
// the first's outcome. A message without message_id uses the body's guid
// (the exact-case "guid" member, byte-exact, as publish reads it); with
// neither it is dead-lettered and the reason recorded. The same file
// keeps an attempt log (status, error or answer excerpt, time): the record
// of why a claim went to the dead-letter queue, which `dlq` shows.
//
// Up to P deliveries are processed at once (--prefetch sets basic.qos before
// consuming, so never more than P are unacked). At --max-seconds, on SIGINT
// or on SIGTERM it stops taking deliveries, lets the calls in flight finish
// (bounded by --http-timeout), records and acks them, and exits 0 with a
// summary on stdout. A second signal exits at once; anything unacked goes
// back to the queue. If the broker connection drops, it reconnects with
// backoff until the deadline.
//
// Flags:
//
//	--claim URL           the claim system (required; http or https, port 1-65535)
//	--max-seconds N       run time in seconds, fractions allowed, 0 to 31536000
//	                      (0: until a signal)
//	--prefetch P          deliveries unacked and in flight at once, 1 to 65535
//	                      (default 5)
//	--http-timeout d      longest partner call, 1ms to 1h (default 10s, far
//	                      below the broker's 30-minute consumer_timeout)
//	--accept-status LIST  the statuses that mean delivered, 2xx only
//	                      (default 201)
//	--sync full|normal    SQLite durability of a record before its ack
//	                      (default full: survives power loss)
//	--log-level level     debug, info (one line per claim), warn, error
//
// Environment:
//
//	EAI_AMQP_URL  broker address (default amqp://guest:guest@127.0.0.1:5672/%2F)
//	EAI_MQ_DB     dedup store (default /root/eaimw/mq/processed.db; created
//	              with its directory, mode 0600)
//
// Output: one log line per claim on stderr (message_id, claimId, outcome,
// status, latency); a summary on stdout at exit.
//
// Exit status:
//
//	0    ran until --max-seconds or a signal, and drained
//	2    usage error (a bad --claim URL or a flag out of its range included)
//	69   the broker cannot be reached (at start, or still not at the end)
//	74   the dedup store cannot be opened or written (the claim in hand is
//	     left unacked and comes back)
//	78   claim.in does not exist (run topology first), or rejecting a claim
//	     would drop it rather than dead-letter it: claim.in lacks the
//	     x-dead-letter-* arguments, or eai.dlx, claim.dead or their binding
//	     is missing (checked at start and before every reject)
//	130  a second signal forced an immediate exit
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/store"
)

const exitForced = 130

// maxRunSeconds bounds --max-seconds (a year): far beyond any run, and far
// below the overflow of a time.Duration.
const maxRunSeconds = 365 * 24 * 3600

func main() {
	// The first signal ends the run gracefully (soft); the second abandons
	// it (hard). run takes both so that tests can drive each.
	hard, cancelHard := context.WithCancel(context.Background())
	soft, cancelSoft := context.WithCancel(hard)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "consumer: %v: finishing the claims in flight (again to exit at once)\n", s)
		cancelSoft()
		<-sigs
		cancelHard()
	}()
	err := run(soft, hard, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	cli.Report(os.Stderr, "consumer", err)
	os.Exit(cli.Code(err))
}

func run(soft, hard context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("consumer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	claimURL := fs.String("claim", "", "claim system `URL` (POSTs go to URL/v1/claims)")
	maxSeconds := fs.Float64("max-seconds", 0, "run for `seconds`, then drain and exit (0: until a signal)")
	prefetch := fs.Int("prefetch", 5, "`n` deliveries unacked and in flight at once (basic.qos)")
	httpTimeout := fs.Duration("http-timeout", 10*time.Second, "longest partner call (`duration`)")
	syncMode := fs.String("sync", "full", "durability of a record before its ack: `mode` full (survives power loss) or normal (survives a crash)")
	acceptStatus := fs.String("accept-status", "201", "comma-separated 2xx `statuses` that mean delivered (only 201 unless the partner documents more)")
	logLevel := fs.String("log-level", "info", "`level`: debug, info, warn, error")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: consumer --claim URL --max-seconds N [--prefetch P] [flags]\n\n"+
			"Consumes claim.in, POSTs each body unchanged to URL/v1/claims (with Idempotency-Key:\n"+
			"message_id), and acks only after the outcome is recorded in EAI_MQ_DB:\n\n"+
			"  partner answer                what happens\n"+
			"  201 (--accept-status)         record as processed, then ack\n"+
			"  another 2xx                   dead-lettered: unexpected status, never delivered\n"+
			"  4xx except 408, 429           reject(requeue=false): dead-lettered to claim.dead\n"+
			"  5xx, 408, 429, no answer      requeue once; failing again when redelivered: dead-letter\n"+
			"  1xx, 3xx                      as 5xx (never loops)\n"+
			"  message_id already processed  ack without calling the partner\n\n"+
			"Up to --prefetch claims are in flight at once; the same message_id never twice at once,\n"+
			"even across consumers sharing EAI_MQ_DB. At --max-seconds or SIGINT/SIGTERM it stops\n"+
			"taking claims, finishes the calls in flight, acks them and exits 0 with a summary on\n"+
			"stdout; a second signal exits at once. One log line per claim goes to stderr.\n\nflags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nenvironment: EAI_AMQP_URL (default %s)\n"+
			"             EAI_MQ_DB (default %s)\n"+
			"exit status: 0 ran and drained, 2 usage, 69 broker unreachable, 74 dedup store failed,\n"+
			"             78 claim.in missing or not dead-lettering (run topology), 130 forced by a second signal\n", broker.DefaultURL, store.DefaultPath)
	}
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	var level slog.Level
	switch {
	case fs.NArg() > 0:
		fs.Usage()
		return cli.Usagef("unexpected argument %q", fs.Arg(0))
	case *claimURL == "":
		fs.Usage()
		return cli.Usagef("--claim URL is required")
	case !(*maxSeconds >= 0 && *maxSeconds <= maxRunSeconds): // NaN fails both
		return cli.Usagef("--max-seconds must be a number from 0 to %d (0: until a signal), not %v", maxRunSeconds, *maxSeconds)
	case *prefetch < 1 || *prefetch > 65535:
		return cli.Usagef("--prefetch must be between 1 and 65535")
	case *httpTimeout < time.Millisecond || *httpTimeout > time.Hour:
		return cli.Usagef("--http-timeout must be from 1ms to 1h, not %s", *httpTimeout)
	case level.UnmarshalText([]byte(*logLevel)) != nil:
		return cli.Usagef("--log-level must be debug, info, warn or error")
	}
	mode := strings.ToLower(*syncMode)
	if mode != "full" && mode != "normal" {
		return cli.Usagef("--sync must be full or normal, not %q", *syncMode)
	}
	accept, err := parseAccept(*acceptStatus)
	if err != nil {
		return cli.Exit(cli.ExitUsage, err)
	}
	endpoint, err := claimsURL(*claimURL)
	if err != nil {
		return cli.Exit(cli.ExitUsage, err)
	}
	amqpURL := broker.URL(getenv)
	if _, err := broker.VHost(amqpURL); err != nil {
		return cli.Exit(cli.ExitUsage, fmt.Errorf("%s: %w", broker.EnvURL, err))
	}

	start := time.Now()
	interrupted := soft // ends on the first signal, not at --max-seconds
	if *maxSeconds > 0 {
		var cancel context.CancelFunc
		soft, cancel = context.WithTimeout(soft, time.Duration(*maxSeconds*float64(time.Second)))
		defer cancel()
	}
	st, err := store.Open(store.Path(getenv), store.Options{Synchronous: mode})
	if err != nil {
		return cli.Exit(cli.ExitIOErr, err)
	}
	defer st.Close()

	r := &relay{
		url:         amqpURL,
		dialer:      broker.Dialer{Program: "consumer", Timeout: 10 * time.Second, Getenv: getenv},
		interrupted: interrupted,
		prefetch:    *prefetch,
		accept:      accept,
		// The lease outlives any call (the HTTP timeout bounds it); it only
		// matters when a consumer on another host dies holding a claim.
		lease:   2**httpTimeout + 30*time.Second,
		log:     slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
		store:   st,
		partner: newPartner(endpoint, *prefetch, *httpTimeout),
		stats:   &stats{},
		hard:    hard,
		fatal:   make(chan error, 1),
		tag:     fmt.Sprintf("eaimq-consumer-%d", os.Getpid()),
	}
	err = r.run(soft)
	if r.sessions > 0 {
		// A summary only for a run that consumed: after a 69 or 78 at
		// start, a "0 received" line would mislead whatever parses stdout.
		r.stats.summary(stdout, time.Since(start))
	}
	if hard.Err() != nil {
		return cli.Exitf(exitForced, "forced exit: claims in flight were left unacked and go back to the queue")
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
