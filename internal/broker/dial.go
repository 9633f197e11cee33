package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/fail"
	"eaimq/internal/redact"
)

// Dial is DialContext without a way to stop it but its timeout.
func Dial(raw, program string, timeout time.Duration) (*amqp.Connection, error) {
	return DialContext(context.Background(), raw, program, timeout)
}

// DialContext connects to raw with a heartbeat short enough that a dead TCP
// connection is noticed in seconds, names the connection after the program
// (it shows in rabbitmqctl list_connections), and speaks TLS for amqps://
// (see Dialer for the certificates). timeout bounds the TCP connect and the
// TLS and AMQP handshakes together (10 s when zero); ctx ends them at once.
// Mind that RabbitMQ answers a wrong password only after 3 s (it would
// answer at once to a client advertising authentication_failure_close,
// which amqp091-go does not): a ctx that ends sooner reports a deadline,
// not the password.
// TLS settings come from the process environment.
//
// Every error is a *fail.Error whose class is the one rule all programs
// follow (the exit codes they document for it in brackets):
//
//	Usage (2)         the URL cannot be used (unparsable, port out of range)
//	Unavailable (69)  the broker cannot be reached: refused, unreachable, no
//	                  answer in time, a port that does not speak TLS, a
//	                  connection limit
//	NoPerm (77)       the broker refused the user or password (or the
//	                  user's access to the vhost)
//	Config (78)       the vhost does not exist; or a TLS setting is wrong:
//	                  the server's certificate is not trusted or not valid
//	                  for the host, a client certificate is missing or
//	                  unreadable, EAI_AMQP_CA is unreadable
//	Interrupted (130) ctx was cancelled (a signal) before the connection was
//	                  open; a ctx deadline that passes is Unavailable, like
//	                  the timeout
//
// Its first line says what to do.
func DialContext(ctx context.Context, raw, program string, timeout time.Duration) (*amqp.Connection, error) {
	return Dialer{Program: program, Timeout: timeout}.Dial(ctx, raw)
}

// Environment variables for amqps://. Each file is PEM.
const (
	// EnvCA names the CA certificate(s) that sign the broker's certificate;
	// without it, the system's roots are trusted.
	EnvCA = "EAI_AMQP_CA"
	// EnvCert and EnvKey name the client certificate and its key, for a
	// broker that asks for one (ssl_options.verify = verify_peer with
	// fail_if_no_peer_cert).
	EnvCert = "EAI_AMQP_CERT"
	EnvKey  = "EAI_AMQP_KEY"
)

// Dialer connects to a broker; its zero value works.
type Dialer struct {
	Program string        // names the connection; default "eaimq"
	Timeout time.Duration // TCP connect and handshakes together; default 10 s
	// Getenv reads EAI_AMQP_CA, EAI_AMQP_CERT and EAI_AMQP_KEY; default
	// os.Getenv. The URL's own cacertfile, certfile, keyfile and
	// server_name_indication query parameters apply when those are unset.
	Getenv func(string) string
}

// Dial connects to raw as DialContext describes. raw may list several
// brokers (see Addresses): the first that answers is used.
func (d Dialer) Dial(ctx context.Context, raw string) (*amqp.Connection, error) {
	addrs := Addresses(raw)
	if _, err := checkList(addrs); err != nil {
		return nil, err
	}
	if len(addrs) > 1 {
		return d.dialList(ctx, addrs)
	}
	return d.dialOne(ctx, raw)
}

// Wait is the dial's bound: Timeout, or 10 s when it is 0 or less.
func (d Dialer) Wait() time.Duration {
	if d.Timeout <= 0 {
		return 10 * time.Second
	}
	return d.Timeout
}

// dialOne connects to one address.
func (d Dialer) dialOne(ctx context.Context, raw string) (*amqp.Connection, error) {
	uri, err := parse(raw)
	if err != nil {
		return nil, err
	}
	timeout, program, getenv := d.Wait(), d.Program, d.Getenv
	if program == "" {
		program = "eaimq"
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	failed := func(c fail.Class, cause error, fix string) error {
		return fail.New(c, &DialError{URL: redact.URL(raw), Err: cause, raw: raw, fix: fix})
	}
	tc, libURL, asked, err := secure(uri, raw, getenv)
	if err != nil {
		return nil, failed(fail.Config, err, "")
	}
	addr := net.JoinHostPort(uri.Host, fmt.Sprint(uri.Port))
	var (
		stop  func() bool
		watch *watchConn
		sock  net.Conn
	)
	dial := func(string, string) (net.Conn, error) {
		conn, err := (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		sock = conn
		// Closing the socket is the only way to stop a TLS or AMQP
		// handshake a silent peer never finishes.
		stop = context.AfterFunc(ctx, func() { conn.Close() })
		// Cleared by the library once the connection is open; the
		// heartbeat takes over.
		conn.SetDeadline(time.Now().Add(timeout))
		if tc == nil {
			return conn, nil
		}
		sc := tls.Client(conn, tc)
		if err := sc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		watch = &watchConn{Conn: sc}
		return watch, nil
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(fmt.Sprintf("%s[%d]", program, os.Getpid()))
	conn, err := amqp.DialConfig(libURL, amqp.Config{
		Heartbeat:  5 * time.Second,
		Locale:     "en_US",
		Properties: props,
		Dial:       dial,
	})
	if stop != nil && !stop() && err == nil {
		// ctx ended just as the handshake finished: the socket is closed.
		err = ctx.Err()
	}
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		// A TLS 1.3 server refuses a client certificate after the client
		// has finished its handshake: the alert comes on a later read, and
		// the library reports only that the connection closed.
		if alert := watch.alert(); alert != nil {
			err = alert
		} else if asked.Load() && hungUp(err) {
			err = &noClientCertError{err}
		}
		return nil, dialFailed(ctx, err, uri, timeout, failed)
	}
	keepSocket(conn, sock)
	return conn, nil
}

// dialFailed is the error of a dial that failed with err.
func dialFailed(ctx context.Context, err error, uri amqp.URI, timeout time.Duration, failed func(fail.Class, error, string) error) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		// The caller's time ran out (a run's --max-seconds, say), not
		// the user's patience: the broker did not finish in time.
		return failed(fail.Unavailable, fmt.Errorf("gave up at the deadline before the handshake finished: %w", ctx.Err()),
			"RabbitMQ takes 3 s to refuse a wrong password; otherwise "+fixUp)
	case ctx.Err() != nil:
		return failed(fail.Interrupted, fmt.Errorf("interrupted while connecting: %w", ctx.Err()), "")
	}
	class, fix := classify(err, uri, timeout)
	return failed(class, err, fix)
}

// secure is the TLS of an amqps:// address (nil for amqp://), the URL the
// library is given, and a flag that the dial sets when the server asks for
// a client certificate none was set for.
func secure(uri amqp.URI, raw string, getenv func(string) string) (tc *tls.Config, libURL string, asked *atomic.Bool, err error) {
	asked = new(atomic.Bool)
	if uri.Scheme != "amqps" {
		return nil, raw, asked, nil
	}
	if tc, err = tlsConfig(uri, getenv); err != nil {
		return nil, "", asked, err
	}
	// The TLS handshake happens in dial, where ctx can stop it and the
	// transport's own errors can be seen; the library gets a connection
	// that is already secure and an amqp:// URL.
	libURL = "amqp" + raw[len("amqps"):]
	// With TLS 1.3 a broker that wants a client certificate refuses its
	// absence only after the client's handshake is done: the alert may come
	// on a read, or be lost to a reset on the next write. The server's
	// certificate request is the one sure sign, so note it.
	if len(tc.Certificates) == 0 {
		tc = tc.Clone()
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			asked.Store(true)
			return &tls.Certificate{}, nil // none to give: the broker decides
		}
	}
	return tc, libURL, asked, nil
}

// noClientCertError: the broker asked for a client certificate, none was
// set, and then it hung up.
type noClientCertError struct{ err error }

func (e *noClientCertError) Error() string {
	return e.err.Error() + " (the broker asked for a client certificate; none was set)"
}
func (e *noClientCertError) Unwrap() error { return e.err }

// hungUp reports whether err is the peer closing the connection.
func hungUp(err error) bool {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code != 0 && ae.Code != amqp.FrameError {
		return false // an answer from the broker, not a hang-up
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, amqp.ErrClosed) ||
		strings.Contains(err.Error(), "EOF")
}

// watchConn keeps the first TLS alert the server sent.
type watchConn struct {
	net.Conn
	mu    sync.Mutex
	first error
}

func (c *watchConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.note(err)
	return n, err
}

func (c *watchConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.note(err)
	return n, err
}

func (c *watchConn) note(err error) {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		c.mu.Lock()
		if c.first == nil {
			c.first = err
		}
		c.mu.Unlock()
	}
}

// alert returns the first alert the server sent, or nil.
func (c *watchConn) alert() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}
