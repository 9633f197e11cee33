// Package publish is the publish program's pipeline: it checks a batch of
// claim files, connects to the broker meanwhile, sends the valid claims
// with pipelined publisher confirms and the mandatory flag, and accounts
// for every file in a Summary.
//
// It knows nothing of flags: the program parses them into a Config. Its
// errors are classified (internal/fail), except the two outcomes that have
// no class of their own, ErrNacked and ErrReturned, whose exit status is
// the program's to choose. Of the reasons that apply to one run, Run
// returns the one that comes first in the order the manual documents.
package publish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/confirm"
	"eaimq/internal/fail"
)

// The largest claim publish accepts: by default (-max-bytes), RabbitMQ
// 4.x's default largest message (max_message_size, 16 MiB), so that a
// claim publish passes is one the broker takes on 3.x and 4.x alike; at
// most RabbitMQ 3.x's default of 128 MiB, which 4.x reaches only when its
// rabbitmq.conf raises max_message_size. A claim above the broker's
// setting is refused by the broker itself (a 406 that closes the channel).
const (
	DefaultMaxBytes = 16 << 20
	MaxMaxBytes     = 128 << 20
)

// Config is one publish run. Window, Timeout and MaxBytes must be at least
// 1 (the program checks their ranges).
type Config struct {
	Files     []string // the claim files, in order; "-" is the stdin of Run, once at most
	Window    int      // confirms outstanding at once
	Timeout   time.Duration
	MaxBytes  int64 // largest claim file accepted
	KeepGoing bool  // publish the valid files even if some are invalid
	Progress  ProgressMode
	Headers   amqp.Table // put on every message ($TRACEPARENT), or nil

	URL    string              // the broker's address (a list, as broker.Dialer takes)
	Getenv func(string) string // for the TLS settings broker.Dialer reads
}

// ErrNacked and ErrReturned are the errors of a run in which the broker
// confirmed claims it did not queue: it refused them (basic.nack), or no
// queue was bound for them (basic.return). Neither has a fail class: the
// program gives each its own exit status.
var (
	ErrNacked   = errors.New("nacked by the broker")
	ErrReturned = errors.New("returned as unroutable")
)

// countError is ErrNacked or ErrReturned with how many claims ended so.
type countError struct {
	n   int
	err error
}

func (e *countError) Error() string { return fmt.Sprintf("%d claim(s) %v", e.n, e.err) }
func (e *countError) Unwrap() error { return e.err }

// Run publishes cfg.Files and accounts for every one of them in the
// summary, whatever happened: one shape every time, so that a script reads
// it the same way after a refused batch, a failed connection or a clean
// run. Lines saying why a claim was not sent, and the progress, go to
// stderr. The error, if any, says what the outcome means as a whole.
func Run(ctx context.Context, cfg Config, stdin io.Reader, stderr io.Writer) (Summary, error) {
	start := time.Now()
	s := Summary{Failures: []Failure{}}
	err := publishFiles(ctx, &cfg, stdin, stderr, &s)
	s.took = time.Since(start)
	s.Seconds = math.Round(s.took.Seconds()*1e6) / 1e6
	return s, err
}

func publishFiles(ctx context.Context, cfg *Config, stdin io.Reader, stderr io.Writer, s *Summary) error {
	// Connect while the files are read: the AMQP handshake is a few round
	// trips of idle waiting, and reading a large batch is mostly syscalls.
	// Nothing is published before every file has been checked.
	dialer := broker.Dialer{Program: "publish", Timeout: cfg.Timeout, Getenv: cfg.Getenv}
	dial := dialAsync(ctx, dialer, cfg.URL, cfg.Window, cfg.Timeout)
	defer dial.close()

	// Check everything first: a bad file in the middle of a batch must not
	// leave the first half sent and the rest not.
	b, err := check(ctx, cfg, stdin, stderr, s)
	if err != nil {
		return err
	}

	d, err := dial.wait(ctx)
	if err != nil {
		if ctx.Err() != nil {
			b.notSentAll(s, "not published: interrupted while connecting to the broker")
			return fail.Errorf(fail.Interrupted, "interrupted while connecting to the broker: nothing published")
		}
		b.notSentAll(s, "not published: no connection to the broker")
		return err
	}
	// A signal must end the run within a second even when a write to the
	// broker is stuck (a broker under an alarm stops reading, and a big
	// claim fills the socket): once send has had its time to drain, the
	// connection is closed under it, which fails the write.
	watchdog := context.AfterFunc(ctx, func() {
		time.AfterFunc(drainGrace+2*pollStep+100*time.Millisecond, func() {
			broker.Abort(d.conn, 100*time.Millisecond)
		})
	})
	defer watchdog()
	prog := newProgress(stderr, cfg.Progress, len(cfg.Files)-b.invalid)
	sendErr := send(ctx, d.p, cfg, b.claims, b.results, prog.update, func() { broker.Abort(d.conn, 0) })
	prog.finish()

	limit := brokerMax(d.closeReason())
	if limit > 0 {
		b.refusedTooLarge(limit)
	}
	b.account(s, stderr)
	if limit > 0 && ctx.Err() == nil {
		return fail.New(fail.Data, tooLargeError(limit, s))
	}
	return verdict(ctx, s, sendErr, d)
}

// batch is the checked files: every claim, what became of each, and how
// many are invalid.
type batch struct {
	claims  []claim
	results []result // indexed like claims
	invalid int
}

// check reads and checks every file, and says on stderr why each invalid
// one is. A batch that is not to be sent is accounted for in s, and its
// error says why.
func check(ctx context.Context, cfg *Config, stdin io.Reader, stderr io.Writer, s *Summary) (*batch, error) {
	files := cfg.Files
	claims, reading, err := readClaims(ctx, files, stdin, cfg.MaxBytes)
	if err != nil {
		for _, f := range files {
			s.add(notSent, f, "", "not published: interrupted while the files were read")
		}
		if len(reading) > 0 {
			return nil, fail.Errorf(fail.Interrupted, "interrupted while reading %s: nothing published", names(reading))
		}
		return nil, fail.Errorf(fail.Interrupted, "interrupted while reading the files: nothing published")
	}
	b := &batch{claims: claims, results: make([]result, len(files))}
	for i, c := range claims {
		if c.err != nil {
			b.invalid++
			b.results[i] = result{outcome: notSent, reason: c.err.Error()}
			fmt.Fprintf(stderr, "publish: %s: %v\n", c.name, c.err)
		}
	}
	// A file that could not be opened outranks one that is not a claim
	// (66 before 65, as the manual orders them): a mistyped name is the
	// likelier mistake, and the one to fix first.
	class, unread := fail.Data, ""
	if n := b.unreadable(); n > 0 {
		class, unread = fail.NoInput, fmt.Sprintf(" (%d missing or unreadable)", n)
	}
	if b.invalid == len(files) {
		b.notSentAll(s, "") // every claim is invalid: no other reason is used
		return nil, fail.Errorf(class, "no valid claim to publish%s", unread)
	}
	if b.invalid > 0 && !cfg.KeepGoing {
		b.notSentAll(s, "not published: the batch has files that are not valid claims (-keep-going sends the valid ones)")
		return nil, fail.Errorf(class, "%d of %d file(s) are not valid claims%s: nothing published (-keep-going sends the valid ones)", b.invalid, len(files), unread)
	}
	return b, nil
}

// unreadable counts the files that could not be opened.
func (b *batch) unreadable() int {
	n := 0
	for _, c := range b.claims {
		if fail.Of(c.err) == fail.NoInput {
			n++
		}
	}
	return n
}

// notSentAll accounts for every claim before any is published.
func (b *batch) notSentAll(s *Summary, why string) {
	s.noInput += b.unreadable()
	for _, c := range b.claims {
		if c.err != nil {
			s.add(invalid, c.name, c.guid, c.err.Error())
		} else {
			s.add(notSent, c.name, c.guid, why)
		}
	}
}

// account counts every claim after send, and says on stderr why each one
// not sent was not.
func (b *batch) account(s *Summary, stderr io.Writer) {
	s.noInput += b.unreadable()
	for i, r := range b.results {
		c := &b.claims[i]
		if c.err != nil {
			s.add(invalid, c.name, c.guid, c.err.Error())
			continue
		}
		s.add(r.outcome, c.name, c.guid, r.reason)
		if r.outcome != sent {
			fmt.Fprintf(stderr, "publish: %s (guid %q): %s\n", c.name, c.guid, r.reason)
		}
	}
}

// verdict is what a run that got as far as sending means as a whole: the
// first of these that applies, a signal with claims in doubt, a signal, a
// confirm that did not come, a connection that died, nacked, returned,
// unreadable, invalid or changed (the order of the manual's exit status).
func verdict(ctx context.Context, s *Summary, sendErr error, d *dialed) error {
	switch {
	case ctx.Err() != nil && s.Unconfirmed > 0:
		return fail.Errorf(fail.TempFail, "interrupted: %d claim(s) published but not confirmed: they may or may not be queued, and publishing them again is safe; %d not published", s.Unconfirmed, s.NotSent)
	case ctx.Err() != nil && s.NotSent > 0:
		return fail.Errorf(fail.Interrupted, "interrupted: %d claim(s) sent and confirmed, %d not published", s.Sent, s.NotSent)
	case errors.Is(sendErr, confirm.ErrTimeout):
		if why := d.blockedReason(); why != "" {
			sendErr = fmt.Errorf("%w: the broker is blocking publishers (%s): a memory or disk alarm; brokerstatus shows it", sendErr, why)
		}
		return fail.New(fail.TempFail, fmt.Errorf("%w: %d claim(s) may or may not be queued; publishing them again is safe", sendErr, s.Unconfirmed))
	case sendErr != nil:
		return fail.New(fail.Unavailable, sendErr)
	case s.Nacked > 0:
		return &countError{s.Nacked, ErrNacked}
	case s.Returned > 0:
		return &countError{s.Returned, ErrReturned}
	case s.noInput > 0:
		return fail.Errorf(fail.NoInput, "%d file(s) were not valid claims (%d missing or unreadable) and %d changed before sending; they were not sent", s.Invalid, s.noInput, s.Changed)
	case s.Invalid > 0 || s.Changed > 0:
		return fail.Errorf(fail.Data, "%d file(s) were not valid claims and %d changed before sending; they were not sent", s.Invalid, s.Changed)
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
