package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/confirm"
	"eaimq/internal/topo"
	"eaimq/internal/trace"
)

// doc is the manual: -h prints its package comment.
//
//go:embed doc.go
var doc string

// Exit codes of publish beyond the shared ones.
const (
	exitReturned = 3
	exitNacked   = 4
)

// Ranges of the numeric flags. A window beyond a few hundred adds no
// throughput (BenchmarkPublishVsBare) and costs memory per slot; RabbitMQ's
// default max_message_size is 128 MiB; a confirm or a connection that
// takes more than an hour is a failure to report, not to wait for.
const (
	maxWindow   = 10000
	maxMaxBytes = 128 << 20
	minTimeout  = 100 * time.Millisecond
	maxTimeout  = time.Hour
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	cli.Report(os.Stderr, "publish", err)
	os.Exit(cli.Code(err))
}

type options struct {
	window    int
	timeout   time.Duration
	maxBytes  int64
	keepGoing bool
	progress  string
	json      bool
	headers   amqp.Table // $TRACEPARENT, when set
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.IntVar(&o.window, "window", 256, fmt.Sprintf("`n` confirms outstanding at once, 1 to %d", maxWindow))
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, fmt.Sprintf("longest `wait` for a confirm and for the connection, %s to %s", minTimeout, maxTimeout))
	fs.Int64Var(&o.maxBytes, "max-bytes", 1<<20, fmt.Sprintf("largest claim file accepted, in `bytes`, 1 to %d (128 MiB, RabbitMQ's default limit)", maxMaxBytes))
	fs.BoolVar(&o.keepGoing, "keep-going", false, "publish the valid files even if some are invalid")
	fs.StringVar(&o.progress, "progress", "auto", "progress on stderr: `mode` auto (terminal only), always, never")
	fs.BoolVar(&o.json, "json", false, "print the summary as one JSON object")
	if err := cli.Flags(fs, doc, args, stdout); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 0:
		return cli.Usagef("no claim file given")
	case o.window < 1 || o.window > maxWindow:
		return cli.Usagef("-window %d is out of range: 1 to %d", o.window, maxWindow)
	case o.timeout < minTimeout || o.timeout > maxTimeout:
		return cli.Usagef("-timeout %s is out of range: %s to %s", o.timeout, minTimeout, maxTimeout)
	case o.maxBytes < 1 || o.maxBytes > maxMaxBytes:
		return cli.Usagef("-max-bytes %d is out of range: 1 to %d (128 MiB, RabbitMQ's default largest message)", o.maxBytes, maxMaxBytes)
	case o.progress != "auto" && o.progress != "always" && o.progress != "never":
		return cli.Usagef("-progress must be auto, always or never")
	}
	var err error
	if o.headers, err = trace.Headers(getenv(trace.Env)); err != nil {
		return cli.Exit(cli.ExitUsage, err)
	}
	if n := strings.Count(strings.Join(fs.Args(), "\x00")+"\x00", "-\x00"); n > 1 {
		return cli.Usagef("standard input (-) can be given once")
	}
	return publish(ctx, fs.Args(), o, getenv, stdin, stdout, stderr)
}

// publish publishes files and prints the summary, whatever happened after
// the flags were read: one shape every time, so that a script reads it the
// same way after a refused batch, a failed connection or a clean run.
func publish(ctx context.Context, files []string, o options, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	start := time.Now()
	s := summary{Failures: []failure{}}
	err := publishFiles(ctx, files, o, getenv, stdin, stderr, &s)
	took := time.Since(start)
	s.Seconds = math.Round(took.Seconds()*1e6) / 1e6
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		enc.Encode(s)
	} else {
		fmt.Fprintln(stdout, s.line(took))
	}
	return err
}

func publishFiles(ctx context.Context, files []string, o options, getenv func(string) string, stdin io.Reader, stderr io.Writer, s *summary) error {
	// Connect while the files are read: the AMQP handshake is a few round
	// trips of idle waiting, and reading a large batch is mostly syscalls.
	// Nothing is published before every file has been checked.
	dial := dialAsync(ctx, broker.Dialer{Program: "publish", Timeout: o.timeout, Getenv: getenv}, broker.URL(getenv), o.window, o.timeout)
	defer dial.close()

	// Check everything first: a bad file in the middle of a batch must not
	// leave the first half sent and the rest not.
	claims, reading, err := readClaims(ctx, files, stdin, o.maxBytes)
	if err != nil {
		for _, f := range files {
			s.add(notSent, f, "", "not published: interrupted while the files were read")
		}
		if len(reading) > 0 {
			return cli.Exitf(cli.ExitInterrupted, "interrupted while reading %s: nothing published", names(reading))
		}
		return cli.Exitf(cli.ExitInterrupted, "interrupted while reading the files: nothing published")
	}
	results := make([]result, len(files))
	nInvalid := 0
	for i, c := range claims {
		if c.err != nil {
			nInvalid++
			results[i] = result{outcome: notSent, reason: c.err.Error()}
			fmt.Fprintf(stderr, "publish: %s: %v\n", c.name, c.err)
		}
	}
	// notSentAll accounts for every claim before any is published.
	notSentAll := func(why string) {
		for _, c := range claims {
			if c.err != nil {
				s.add(invalid, c.name, c.guid, c.err.Error())
			} else {
				s.add(notSent, c.name, c.guid, why)
			}
		}
	}
	if nInvalid == len(files) {
		notSentAll("") // every claim is invalid: no other reason is used
		return cli.Exitf(cli.ExitDataErr, "no valid claim to publish")
	}
	if nInvalid > 0 && !o.keepGoing {
		notSentAll("not published: the batch has files that are not valid claims (-keep-going sends the valid ones)")
		return cli.Exitf(cli.ExitDataErr, "%d of %d file(s) are not valid claims: nothing published (-keep-going sends the valid ones)", nInvalid, len(files))
	}

	d, err := dial.wait(ctx)
	if err != nil {
		if ctx.Err() != nil {
			notSentAll("not published: interrupted while connecting to the broker")
			return cli.Exitf(cli.ExitInterrupted, "interrupted while connecting to the broker: nothing published")
		}
		notSentAll("not published: no connection to the broker")
		return err
	}
	// A signal must end the run within a second even when a write to the
	// broker is stuck (a broker under an alarm stops reading, and a big
	// claim fills the socket): once send has had its time to drain, the
	// connection is closed under it, which fails the write.
	watchdog := context.AfterFunc(ctx, func() {
		time.AfterFunc(drainGrace+2*pollStep+100*time.Millisecond, func() {
			d.conn.CloseDeadline(time.Now().Add(100 * time.Millisecond))
		})
	})
	defer watchdog()
	prog := newProgress(stderr, o.progress, len(files)-nInvalid)
	sendErr := send(ctx, d.p, o, claims, results, prog.update)
	prog.finish()

	for i, r := range results {
		c := &claims[i]
		if c.err != nil {
			s.add(invalid, c.name, c.guid, c.err.Error())
			continue
		}
		s.add(r.outcome, c.name, c.guid, r.reason)
		if r.outcome != sent {
			fmt.Fprintf(stderr, "publish: %s (guid %q): %s\n", c.name, c.guid, r.reason)
		}
	}

	switch {
	case ctx.Err() != nil && s.Unconfirmed > 0:
		return cli.Exitf(cli.ExitTempFail, "interrupted: %d claim(s) published but not confirmed: they may or may not be queued, and publishing them again is safe; %d not published", s.Unconfirmed, s.NotSent)
	case ctx.Err() != nil && s.NotSent > 0:
		return cli.Exitf(cli.ExitInterrupted, "interrupted: %d claim(s) sent and confirmed, %d not published", s.Sent, s.NotSent)
	case errors.Is(sendErr, confirm.ErrTimeout):
		if why := d.blockedReason(); why != "" {
			sendErr = fmt.Errorf("%w: the broker is blocking publishers (%s): a memory or disk alarm; brokerstatus shows it", sendErr, why)
		}
		return cli.Exit(cli.ExitTempFail, fmt.Errorf("%w: %d claim(s) may or may not be queued; publishing them again is safe", sendErr, s.Unconfirmed))
	case sendErr != nil:
		return cli.Exit(cli.ExitUnavailable, sendErr)
	case s.Nacked > 0:
		return cli.Exitf(exitNacked, "%d claim(s) nacked by the broker", s.Nacked)
	case s.Returned > 0:
		return cli.Exitf(exitReturned, "%d claim(s) returned as unroutable", s.Returned)
	case s.Invalid > 0 || s.Changed > 0:
		return cli.Exitf(cli.ExitDataErr, "%d file(s) were not valid claims and %d changed before sending; they were not sent", s.Invalid, s.Changed)
	}
	return nil
}

// names lists a few file names for a message.
func names(files []string) string {
	if len(files) > 3 {
		return strings.Join(files[:3], ", ") + fmt.Sprintf(" and %d more", len(files)-3)
	}
	return strings.Join(files, ", ")
}

// dialed is a connection with its confirming publisher, or why there is none.
type dialed struct {
	conn    *amqp.Connection
	p       *confirm.Publisher
	blocked chan amqp.Blocking
	err     error
}

// blockedReason says why the broker blocks this connection, if it does.
func (d *dialed) blockedReason() string {
	why := ""
	for {
		select {
		case b := <-d.blocked:
			why = ""
			if b.Active {
				why = b.Reason
			}
			continue
		default:
		}
		return why
	}
}

// dialing is a connection being made in the background.
type dialing struct {
	ctx  context.Context
	done chan struct{} // closed when d is set
	d    dialed
}

// dialAsync starts connecting (and checking the exchange) at once; a
// signal (ctx) ends the attempt.
func dialAsync(ctx context.Context, dialer broker.Dialer, url string, window int, timeout time.Duration) *dialing {
	g := &dialing{ctx: ctx, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		conn, err := dialer.Dial(ctx, url)
		if err != nil {
			g.d = dialed{err: cli.Exit(cli.ExitUnavailable, err)}
			return
		}
		// Publishing to a missing exchange makes the broker close the
		// channel with 404 mid-batch; say "run topology first" up front, on
		// the channel that will publish (one round trip less).
		ch, err := conn.Channel()
		if err == nil {
			err = topo.RequireExchange(ch, topo.Exchange)
		}
		var p *confirm.Publisher
		if err == nil {
			// Await's timeout is send's tick; send keeps the user's
			// -timeout itself, so that it can also watch for a signal.
			p, err = confirm.New(ch, window, min(timeout, pollStep))
		}
		if err != nil {
			broker.Close(conn)
			g.d = dialed{err: cli.Broker(err, topo.ErrMissing)}
			return
		}
		// A broker under a memory or disk alarm stops reading from
		// publishers; its connection.blocked says why the confirm is late.
		blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 64))
		g.d = dialed{conn: conn, p: p, blocked: blocked}
	}()
	return g
}

// wait returns the connection, or why there is none; it stops waiting
// when ctx ends.
func (g *dialing) wait(ctx context.Context) (*dialed, error) {
	select {
	case <-g.done:
		return &g.d, g.d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close closes the connection, now if it is made, else when it is: exit
// never waits for a handshake. After a signal the broker gets a moment
// for its close-ok, not the usual two seconds.
func (g *dialing) close() {
	closeIt := func() {
		if g.d.conn == nil {
			return
		}
		if g.ctx.Err() != nil {
			g.d.conn.CloseDeadline(time.Now().Add(200 * time.Millisecond))
			return
		}
		broker.Close(g.d.conn)
	}
	select {
	case <-g.done:
		closeIt()
	default:
		go func() { <-g.done; closeIt() }()
	}
}
