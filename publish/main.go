// Publish sends claim JSON files to RabbitMQ and reports each one sent only
// when the broker has confirmed it and routed it to a queue.
//
// It is the drop-in for the lab's publish.py: `publish claim.json` publishes
// the file's bytes, unchanged, to exchange eai.claim with routing key claim,
// persistent (delivery_mode 2), message_id = the JSON's guid, content_type
// application/json, with publisher confirms and the mandatory flag.
//
// Usage:
//
//	publish [flags] FILE...
//
// FILE "-" reads one claim from standard input. Many files are published in
// one connection with pipelined confirms (up to -window outstanding), not one
// round trip each.
//
// Every file is read and checked before anything is published: it must be a
// JSON object of at most -max-bytes with a non-empty string "guid". If any
// file fails, nothing is published (exit 65) unless -keep-going asks to send
// the valid ones.
//
// A claim counts as sent only when the broker acked it and did not return it.
// The broker acks an unroutable mandatory message after returning it
// (basic.return, then basic.ack), so a return is a failure even though an
// ack follows.
//
// Flags:
//
//	-window n       confirms outstanding at once (default 256)
//	-timeout d      longest wait for a confirm (default 10s)
//	-max-bytes n    largest claim file accepted (default 1048576)
//	-keep-going     publish the valid files even if some are invalid
//	-progress mode  auto (on a terminal), always or never (default auto)
//
// Output: each failed claim gets one line on stderr with its file name and
// reason; stdout gets a summary line (sent, returned, nacked, invalid,
// unconfirmed). Progress goes to stderr when it is a terminal.
//
// Environment:
//
//	EAI_AMQP_URL  broker address (default amqp://guest:guest@127.0.0.1:5672/%2F;
//	              amqps:// speaks TLS)
//
// Exit status (when several apply, the first in this list):
//
//	0   every claim was confirmed and routed
//	2   usage error
//	69  the broker cannot be reached, or the connection died mid-run
//	75  a confirm did not come in time: those claims may or may not be
//	    queued; publishing them again is safe, since the consumer
//	    deduplicates by message_id
//	78  exchange eai.claim does not exist: run topology first
//	4   the broker nacked a claim
//	3   a claim was returned as unroutable (no queue bound)
//	65  a file is not a valid claim (missing, unreadable, not JSON, not an
//	    object, no string guid, too large)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/confirm"
	"eaimq/internal/topo"
)

// Exit codes of publish beyond the shared ones.
const (
	exitReturned = 3
	exitNacked   = 4
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
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.IntVar(&o.window, "window", 256, "`n` confirms outstanding at once")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "longest `wait` for a confirm")
	fs.Int64Var(&o.maxBytes, "max-bytes", 1<<20, "largest claim file accepted, in `bytes`")
	fs.BoolVar(&o.keepGoing, "keep-going", false, "publish the valid files even if some are invalid")
	fs.StringVar(&o.progress, "progress", "auto", "progress on stderr: `mode` auto (terminal only), always, never")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: publish [flags] FILE...   (FILE - reads standard input)\n\n"+
			"Publishes each claim JSON file, its bytes unchanged, to exchange eai.claim with routing\n"+
			"key claim: persistent, message_id = the JSON's guid, content_type application/json,\n"+
			"with publisher confirms and mandatory. A claim is sent only when the broker acked it\n"+
			"and did not return it (unroutable). Every file is checked first (a JSON object, a\n"+
			"non-empty string guid, at most -max-bytes); if one fails, nothing is published\n"+
			"unless -keep-going. Failures: one line each on stderr. Summary: stdout.\n\nflags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nenvironment: EAI_AMQP_URL (default %s)\n"+
			"exit status: 0 all sent, 2 usage, 3 returned (unroutable), 4 nacked, 65 invalid file,\n"+
			"  69 broker unreachable, 75 confirm timed out (may be queued; resending is safe),\n"+
			"  78 exchange eai.claim missing (run topology)\n", broker.DefaultURL)
	}
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 0:
		fs.Usage()
		return cli.Usagef("no claim file given")
	case o.window < 1:
		return cli.Usagef("-window must be at least 1")
	case o.timeout <= 0:
		return cli.Usagef("-timeout must be positive")
	case o.maxBytes < 1:
		return cli.Usagef("-max-bytes must be at least 1")
	case o.progress != "auto" && o.progress != "always" && o.progress != "never":
		return cli.Usagef("-progress must be auto, always or never")
	}
	if n := strings.Count(strings.Join(fs.Args(), "\x00")+"\x00", "-\x00"); n > 1 {
		return cli.Usagef("standard input (-) can be given once")
	}
	return publish(ctx, fs.Args(), o, getenv, stdin, stdout, stderr)
}

func publish(ctx context.Context, files []string, o options, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	start := time.Now()
	// Connect while the files are read: the AMQP handshake is a few round
	// trips of idle waiting, and reading a large batch is mostly syscalls.
	// Nothing is published before every file has been validated.
	connection := dialAsync(broker.URL(getenv), o.window, o.timeout)
	defer func() {
		if d, err := connection(); err == nil {
			broker.Close(d.conn)
		}
	}()

	// Validate everything first: a bad file in the middle of a batch must
	// not leave the first half sent and the rest not.
	claims := readClaims(files, stdin, o.maxBytes)
	results := make([]result, len(files))
	invalid := 0
	for i, c := range claims {
		if c.err != nil {
			invalid++
			results[i] = result{outcome: notSent, reason: c.err.Error()}
			fmt.Fprintf(stderr, "publish: %s: %v\n", c.name, c.err)
		}
	}
	if invalid > 0 && !o.keepGoing {
		fmt.Fprintf(stdout, "publish: 0 sent, %d invalid of %d; nothing published (-keep-going sends the valid ones)\n", invalid, len(files))
		return cli.Exitf(cli.ExitDataErr, "%d of %d file(s) are not valid claims", invalid, len(files))
	}
	if invalid == len(files) {
		fmt.Fprintf(stdout, "publish: 0 sent, %d invalid\n", invalid)
		return cli.Exitf(cli.ExitDataErr, "no valid claim to publish")
	}

	d, err := connection()
	if err != nil {
		return err
	}
	p := d.p
	prog := newProgress(stderr, o.progress, len(files)-invalid)
	sendErr := send(ctx, p, o.window, claims, results, prog.update)
	prog.finish()

	var n [notSent + 1]int
	for i, r := range results {
		if claims[i].err != nil {
			continue
		}
		n[r.outcome]++
		if r.outcome != sent {
			fmt.Fprintf(stderr, "publish: %s (guid %s): %s\n", claims[i].name, claims[i].guid, r.reason)
		}
	}
	fmt.Fprintf(stdout, "publish: %d sent, %d returned, %d nacked, %d invalid, %d unconfirmed, %d not sent (%s)\n",
		n[sent], n[returned], n[nacked], invalid, n[unconfirmed], n[notSent], time.Since(start).Round(time.Millisecond))

	switch {
	case errors.Is(sendErr, context.Canceled):
		return cli.Exitf(cli.ExitTempFail, "interrupted: %d claim(s) not confirmed", n[unconfirmed]+n[notSent])
	case errors.Is(sendErr, confirm.ErrTimeout):
		if why := d.blockedReason(); why != "" {
			sendErr = fmt.Errorf("%w: the broker is blocking publishers (%s): a memory or disk alarm; brokerstatus shows it", sendErr, why)
		}
		return cli.Exit(cli.ExitTempFail, sendErr)
	case sendErr != nil:
		return cli.Exit(cli.ExitUnavailable, sendErr)
	case n[nacked] > 0:
		return cli.Exitf(exitNacked, "%d claim(s) nacked by the broker", n[nacked])
	case n[returned] > 0:
		return cli.Exitf(exitReturned, "%d claim(s) returned as unroutable", n[returned])
	case invalid > 0:
		return cli.Exitf(cli.ExitDataErr, "%d file(s) were not valid claims and were skipped", invalid)
	}
	return nil
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

// dialAsync starts connecting (and checking the exchange) at once and
// returns a function that waits for the outcome; it may be called any number
// of times.
func dialAsync(url string, window int, timeout time.Duration) func() (*dialed, error) {
	c := make(chan dialed, 1)
	go func() {
		conn, err := broker.Dial(url, "publish", timeout)
		if err != nil {
			c <- dialed{err: cli.Exit(cli.ExitUnavailable, err)}
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
			p, err = confirm.New(ch, window, timeout)
		}
		if err != nil {
			broker.Close(conn)
			c <- dialed{err: cli.Broker(err, topo.ErrMissing)}
			return
		}
		// A broker under a memory or disk alarm stops reading from
		// publishers; its connection.blocked says why the confirm is late.
		blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 64))
		c <- dialed{conn: conn, p: p, blocked: blocked}
	}()
	return sync.OnceValues(func() (*dialed, error) {
		d := <-c
		return &d, d.err
	})
}
