// Package broker holds what every eaimq program does the same way with the
// AMQP address: read it from the environment, dial it (over TLS for
// amqps://), say what to do when that fails, and print it without the
// password (package redact).
//
// No error that leaves this package holds the raw URL or its password, in
// any spelling: they are built from the redacted URL, and the library's own
// text is scrubbed. Errors from Dial and VHost are *fail.Error values that
// carry their class (see DialContext).
package broker

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/fail"
	"eaimq/internal/redact"
)

// EnvURL is the environment variable every program reads the broker address
// from; DefaultURL is the lab's default.
const (
	EnvURL     = "EAI_AMQP_URL"
	DefaultURL = "amqp://guest:guest@127.0.0.1:5672/%2F"
)

// URL returns the broker address from getenv, or the default.
func URL(getenv func(string) string) string {
	if u := getenv(EnvURL); u != "" {
		return u
	}
	return DefaultURL
}

// URLError is an AMQP address that cannot be used as written: why says
// what is wrong and how to write it, URL is the address redacted.
type URLError struct {
	URL string
	Why string
}

func (e *URLError) Error() string { return fmt.Sprintf("invalid AMQP URL %s: %s", e.URL, e.Why) }

// encodeHint is the fix for most unparsable addresses.
const encodeHint = `percent-encode reserved characters in the user, password and vhost ("%" as %25, "@" as %40, "/" as %2F, "?" as %3F, "#" as %23, ":" as %3A)`

// parse is amqp.ParseURI with the checks it leaves to the dial (the port's
// range) or gets wrong silently (an "@" after the host, where an unencoded
// "/" in a password puts it), and errors that never echo raw. Its errors
// are *fail.Error of class Usage: a URL is an argument.
func parse(raw string) (amqp.URI, error) {
	fail := func(why string) (amqp.URI, error) {
		return amqp.URI{}, fail.New(fail.Usage, &URLError{URL: redact.URL(raw), Why: why})
	}
	scheme, rest, _ := strings.Cut(raw, "://")
	switch strings.ToLower(scheme) {
	case "amqp", "amqps":
	default:
		return fail("it must start with amqp:// or amqps:// (amqp://user:password@host:5672/vhost)")
	}
	if strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fail("it contains a space or a control character; " + encodeHint)
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 && strings.Contains(rest[i:], "@") {
		return fail(`an "@" after the host: ` + encodeHint)
	}
	if _, err := url.Parse(raw); err != nil {
		var esc url.EscapeError
		var host url.InvalidHostError
		switch {
		case errors.As(err, &esc):
			return fail(`a "%" is not followed by two hex digits; ` + encodeHint)
		case errors.As(err, &host):
			return fail("the host has a character no host name has; " + encodeHint)
		case strings.Contains(err.Error(), "invalid port"):
			return fail("the port is not a number; " + encodeHint)
		}
		return fail("it does not parse as a URL; " + encodeHint)
	}
	u, err := amqp.ParseURI(raw)
	if err != nil {
		return fail(redact.Scrub(err.Error(), raw))
	}
	if u.Port < 1 || u.Port > 65535 {
		return fail(fmt.Sprintf("port %d is out of range (1-65535; RabbitMQ listens on 5672, or 5671 for TLS)", u.Port))
	}
	return u, nil
}

// VHost returns the virtual host an AMQP URI names ("/" when it names none),
// using the client library's own parser so that it agrees with Dial. A URL
// that cannot be used fails with exit code 2, as Dial would; so does a list
// whose addresses name different vhosts.
func VHost(raw string) (string, error) {
	u, err := checkList(Addresses(raw))
	if err != nil {
		return "", err
	}
	return u.Vhost, nil
}

// Code returns the AMQP reply code of err (404, 406, ...), or 0.
func Code(err error) int {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return 0
}

// Reason returns the broker's own text for err when it is an AMQP error
// ("PRECONDITION_FAILED - inequivalent arg ..."), else err's text.
func Reason(err error) string {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return ae.Reason
	}
	return err.Error()
}

// IsLocal reports whether the broker at raw (the first, for a list) is on
// this machine, so that rabbitmqctl reaches the same node.
func IsLocal(raw string) bool {
	u, err := parse(Addresses(raw)[0])
	if err != nil {
		return false
	}
	switch u.Host {
	case "localhost", "127.0.0.1", "::1", "[::1]":
		return true
	}
	return false
}

// Port is the AMQP port of raw's first address, 0 when it does not parse.
func Port(raw string) int {
	u, err := parse(Addresses(raw)[0])
	if err != nil {
		return 0
	}
	return u.Port
}

// Close closes conn, waiting at most two seconds for the broker's
// close-ok: a broker that blocked the connection (a memory or disk alarm)
// never answers, and a program must not hang at exit. Channels close with
// their connection, and with them every unacked delivery goes back.
func Close(conn *amqp.Connection) { Abort(conn, 2*time.Second) }

// Abort closes conn within grace whatever the library is doing with it.
//
// The socket's own deadline comes first. amqp091-go's CloseDeadline first
// takes the connection's lock and only then sets the deadline, and the
// library's own shutdown (three missed heartbeats start it: a node that
// froze, or stopped reading under an alarm) holds that lock while it
// waits for the lock of a channel whose Publish is blocked in a write the
// broker no longer reads. Neither would ever return, and the program
// would hang at exit (publish's TestFrozenMidBatch; TestCloseUnderAFrozenPublish
// here). With the deadline on the socket the write fails, the Publish
// returns, the shutdown ends, and the close goes through. Once the
// shutdown has begun the connection already says it is closed, so the
// deadline is set whether or not it does.
func Abort(conn *amqp.Connection, grace time.Duration) {
	if conn == nil {
		return
	}
	if s, ok := sockets.Load(conn); ok {
		s.(net.Conn).SetDeadline(time.Now().Add(grace))
	}
	if !conn.IsClosed() {
		conn.CloseDeadline(time.Now().Add(grace))
	}
}

// sockets holds the TCP socket of each connection Dialer made, until the
// library has finished with it (Abort).
var sockets sync.Map // *amqp.Connection → net.Conn

// keepSocket keeps sock as conn's until the library's shutdown has ended:
// it closes every NotifyClose channel last, after the channels and the
// socket (not when it sends the close's error, which is its first step).
func keepSocket(conn *amqp.Connection, sock net.Conn) {
	if sock == nil {
		return
	}
	sockets.Store(conn, sock)
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		for range closed {
		}
		sockets.Delete(conn)
	}()
}
