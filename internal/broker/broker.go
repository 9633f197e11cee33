// Package broker holds what every eaimq program does the same way with the
// AMQP address: read it from the environment, dial it, and print it without
// the password.
package broker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
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

// Redact returns raw with the password of its userinfo replaced, so that an
// address can go into any message or log line.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable AMQP URL)"
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	return u.String()
}

// VHost returns the virtual host an AMQP URI names ("/" when it names none),
// using the client library's own parser so that it agrees with Dial.
func VHost(raw string) (string, error) {
	u, err := amqp.ParseURI(raw)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", Redact(raw), err)
	}
	return u.Vhost, nil
}

// Dial connects to raw with a heartbeat short enough that a dead TCP
// connection is noticed in seconds, names the connection after the program
// (it shows in rabbitmqctl list_connections), and speaks TLS for amqps://.
func Dial(raw, program string, timeout time.Duration) (*amqp.Connection, error) {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(fmt.Sprintf("%s[%d]", program, os.Getpid()))
	cfg := amqp.Config{
		Heartbeat:  5 * time.Second,
		Locale:     "en_US",
		Properties: props,
		Dial:       amqp.DefaultDial(timeout),
	}
	if u, err := amqp.ParseURI(raw); err == nil && u.Scheme == "amqps" {
		cfg.TLSClientConfig = &tls.Config{ServerName: u.Host, MinVersion: tls.VersionTLS12}
	}
	conn, err := amqp.DialConfig(raw, cfg)
	if err != nil {
		return nil, &DialError{URL: Redact(raw), Err: err}
	}
	return conn, nil
}

// DialError says where a connection was tried, without the password.
type DialError struct {
	URL string
	Err error
}

func (e *DialError) Error() string {
	msg := e.Err.Error()
	var ae *amqp.Error
	if errors.As(e.Err, &ae) && ae.Code == amqp.AccessRefused {
		msg += " (check the user, password and vhost; guest may only connect over loopback)"
	}
	return fmt.Sprintf("connect to %s: %s (is the broker up? scripts/mq-up.sh starts one)", e.URL, msg)
}

func (e *DialError) Unwrap() error { return e.Err }

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

// IsLocal reports whether the broker at raw is on this machine, so that
// rabbitmqctl reaches the same node.
func IsLocal(raw string) bool {
	u, err := amqp.ParseURI(raw)
	if err != nil {
		return false
	}
	switch u.Host {
	case "localhost", "127.0.0.1", "::1", "[::1]":
		return true
	}
	return false
}

// Close closes conn, waiting at most two seconds for the broker's
// close-ok: a broker that blocked the connection (a memory or disk alarm)
// never answers, and a program must not hang at exit. Channels close with
// their connection, and with them every unacked delivery goes back.
func Close(conn *amqp.Connection) {
	if conn != nil && !conn.IsClosed() {
		conn.CloseDeadline(time.Now().Add(2 * time.Second))
	}
}
