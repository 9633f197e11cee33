// Package dlqweb is dlq serve's web page: the dead letters of claim.dead
// grouped by their recorded reason, one claim in full, and the actions of
// the people who fix failed claims (retry, purge, edit and retry), each
// behind a confirmation and a CSRF token.
//
// The handlers know nothing of AMQP or of the store: every read and every
// action is a call to a Backend. The program's Backend is this package's
// web (web*.go, Serve), over the dead-letter engine (internal/dlq): it
// walks and acts with the very functions dlq's commands run, so that the
// page is exactly as safe as the command line. The dependency runs one
// way: this package imports the engine, never the reverse.
// This package adds what a web page needs to be safe: it binds to loopback
// unless a token guards it (Check), answers 401 to anything without the
// token, refuses every action when read-only (even a POST made by hand),
// checks a CSRF token and the browser's cross-origin headers on every
// POST, and renders through html/template, which escapes every field of a
// claim (a claim is untrusted input).
package dlqweb

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"
)

// EnvToken names the environment variable holding the token that any
// address other than loopback needs; EnvTokens, the file of named tokens
// (tokens.go) that may stand beside it or instead of it.
const (
	EnvToken  = "EAIMQ_DLQ_TOKEN"
	EnvTokens = "EAIMQ_DLQ_TOKENS"
)

// Config is one page.
type Config struct {
	Addr     string  // where it listens; not loopback needs Tokens
	Tokens   []Token // EAIMQ_DLQ_TOKEN and EAIMQ_DLQ_TOKENS: none on loopback means none needed
	ReadOnly bool
	// NoArchive: purge deletes for good (dlq serve -no-archive); else it
	// moves the dead letters to claim.dead.archive, and the archive page
	// restores them.
	NoArchive bool
	Refresh   time.Duration // the groups page reloads this often (0: never)
	Banner    Banner
	Backend   Backend
	// Clean takes secrets (the store's location, a broker URL's
	// password) out of an error's text before the page shows it.
	Clean func(string) string
	Log   io.Writer // errors and refused tokens, for whoever runs it
}

// Banner says, on every page, which queue of which broker the page shows:
// the broker's address without its user or password, the vhost, the queue.
type Banner struct {
	Broker, VHost, Queue string
}

// Loopback says whether addr (host:port) listens on loopback only.
// An empty host or an unspecified one (0.0.0.0, ::) is every interface.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && loopbackName(host)
}

// loopbackName says whether host (a name or an IP, IPv6 bracketed or not)
// is this machine's loopback.
func loopbackName(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// Check refuses a config that is not safe: any address other than loopback
// needs a token (Tokens checked each one's length and the file already).
func Check(c Config) error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("-addr %q: want host:port, such as 127.0.0.1:8088", c.Addr)
	}
	if !Loopback(c.Addr) && len(c.Tokens) == 0 {
		return fmt.Errorf("-addr %s is not loopback: anyone who reaches it could replay and purge claims; "+
			"set %s to a secret token, or %s to a file of named ones (or listen on 127.0.0.1)", c.Addr, EnvToken, EnvTokens)
	}
	for _, t := range c.Tokens {
		if err := checkToken(t); err != nil {
			return err
		}
	}
	return nil
}
