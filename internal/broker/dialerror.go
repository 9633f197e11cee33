package broker

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"crypto/tls"
	"crypto/x509"
	"eaimq/internal/fail"
	"eaimq/internal/redact"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// DialError is a failed connection: where it was tried (without the
// password), the cause, and what to do.
type DialError struct {
	URL string // redacted
	Err error
	raw string
	fix string
}

// Error reads "connect to URL: cause; fix" on one line, the cause scrubbed
// of the password in case a library ever puts the address into its text.
func (e *DialError) Error() string {
	cause := e.Err.Error()
	var ae *amqp.Error
	if errors.As(e.Err, &ae) {
		cause = ae.Reason // the broker's words, without the library's frame
	}
	msg := fmt.Sprintf("connect to %s: %s", e.URL, redact.Scrub(cause, e.raw))
	if e.fix != "" {
		msg += "; " + e.fix
	}
	return msg
}

func (e *DialError) Unwrap() error { return e.Err }

// Fix is the advice of the error: what to do about it.
func (e *DialError) Fix() string { return e.fix }

const fixUp = "is the broker up? (scripts/mq-up.sh starts one)"

var vhostNotFound = regexp.MustCompile(`(?i)vhost .* not found`)

// classify maps a failed dial to its class and the fix to print.
func classify(err error, uri amqp.URI, timeout time.Duration) (fail.Class, string) {
	hostport := net.JoinHostPort(uri.Host, fmt.Sprint(uri.Port))
	var (
		ae       *amqp.Error
		hostErr  x509.HostnameError
		authErr  x509.UnknownAuthorityError
		certErr  x509.CertificateInvalidError
		recErr   tls.RecordHeaderError
		dnsErr   *net.DNSError
		netErr   net.Error
		vhostArg = shellQuote(uri.Vhost)
	)
	isAMQP := errors.As(err, &ae)
	switch {
	case errors.Is(err, amqp.ErrVhost):
		return fail.Config, fmt.Sprintf("the broker refused vhost %q: create it (rabbitmqctl add_vhost %s) or grant %s access (rabbitmqctl set_permissions -p %s %s '.*' '.*' '.*')",
			uri.Vhost, vhostArg, uri.Username, vhostArg, shellQuote(uri.Username))
	case errors.Is(err, amqp.ErrSASL):
		return fail.Config, "the broker offers no login mechanism this client speaks (PLAIN, AMQPLAIN)"
	case isAMQP && ae.Code == amqp.NotAllowed && vhostNotFound.MatchString(ae.Reason):
		return fail.Config, fmt.Sprintf("vhost %q does not exist: rabbitmqctl add_vhost %s, then rabbitmqctl set_permissions -p %s %s '.*' '.*' '.*'",
			uri.Vhost, vhostArg, vhostArg, shellQuote(uri.Username))
	case isAMQP && ae.Code == amqp.NotAllowed && strings.Contains(ae.Reason, "refused for user"):
		return fail.NoPerm, fmt.Sprintf("user %q has no access to vhost %q: rabbitmqctl set_permissions -p %s %s '.*' '.*' '.*'",
			uri.Username, uri.Vhost, vhostArg, shellQuote(uri.Username))
	case isAMQP && ae.Code == amqp.AccessRefused:
		return fail.NoPerm, fmt.Sprintf("the broker refused user %q: check the user and password (and that the user may log in from here: guest may only connect over loopback)", uri.Username)
	case isAMQP && ae.Server:
		return fail.Unavailable, "the broker closed the connection while it was opened: " + fixUp
	case errors.As(err, &hostErr):
		return fail.Config, fmt.Sprintf("the certificate of %s is not valid for %q, only for %s: connect by a name it lists, or have it reissued for %s",
			hostport, uri.Host, validFor(hostErr.Certificate), uri.Host)
	case errors.As(err, &authErr):
		issuer := ""
		if authErr.Cert != nil {
			issuer = fmt.Sprintf(" (issuer %q)", authErr.Cert.Issuer.String())
		}
		return fail.Config, fmt.Sprintf("the certificate of %s is signed by an authority this machine does not trust%s: set %s to the CA's PEM file", hostport, issuer, EnvCA)
	case errors.As(err, &certErr):
		return fail.Config, fmt.Sprintf("the certificate of %s is not acceptable: renew it, or set %s to the CA that signs it", hostport, EnvCA)
	case errors.As(err, &recErr):
		return fail.Unavailable, fmt.Sprintf("this port does not speak TLS: use amqp:// for %s, or the broker's TLS port (usually 5671)", hostport)
	// A TLS 1.3 server refuses a client certificate after the client's
	// handshake is done: the alert arrives on the first read, where the
	// library keeps only its text, or the connection is reset.
	case errors.As(err, new(*noClientCertError)), strings.Contains(err.Error(), "certificate required"), strings.Contains(err.Error(), "bad certificate"):
		return fail.Config, fmt.Sprintf("the broker wants a client certificate it trusts: set %s and %s to its PEM files", EnvCert, EnvKey)
	case errors.As(err, &dnsErr):
		return fail.Unavailable, fmt.Sprintf("host %q not found: check the host in %s; %s", uri.Host, EnvURL, fixUp)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fail.Unavailable, fixUp
	case errors.As(err, &netErr) && netErr.Timeout():
		return fail.Unavailable, fmt.Sprintf("no answer from %s within %s: %s", hostport, timeout, fixUp)
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET),
		// The library reports a socket lost during the AMQP handshake as
		// an *amqp.Error of its own, with the cause as text only.
		isAMQP && (ae.Reason == io.EOF.Error() || strings.Contains(ae.Reason, "connection reset")):
		return fail.Unavailable, fmt.Sprintf("%s hung up during the handshake (is it a RabbitMQ AMQP port? for amqps://, is it the TLS port?): %s", hostport, fixUp)
	}
	return fail.Unavailable, fixUp
}

// validFor lists the names a certificate is valid for.
func validFor(c *x509.Certificate) string {
	if c == nil {
		return "other names"
	}
	var names []string
	for _, n := range c.DNSNames {
		names = append(names, fmt.Sprintf("%q", n))
	}
	for _, ip := range c.IPAddresses {
		names = append(names, fmt.Sprintf("%q", ip.String()))
	}
	if len(names) == 0 {
		return fmt.Sprintf("no name (CN %q, and no subject alternative names)", c.Subject.CommonName)
	}
	return strings.Join(names, ", ")
}

// shellQuote quotes s for a command line a user can paste.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@%+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
