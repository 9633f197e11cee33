// Package dlqweb is dlq serve's web page: the dead letters of claim.dead
// grouped by their recorded reason, one claim in full, and the actions of
// the people who fix failed claims (retry, purge, edit and retry), each
// behind a confirmation and a CSRF token.
//
// It knows nothing of AMQP or of the store: every read and every action is
// a call to a Backend, which dlq's engine (internal/dlq) implements with
// the very functions dlq's commands run, so that the page is exactly as
// safe as the command line.
// This package adds what a web page needs to be safe: it binds to loopback
// unless a token guards it (Check), answers 401 to anything without the
// token, refuses every action when read-only (even a POST made by hand),
// checks a CSRF token and the browser's cross-origin headers on every
// POST, and renders through html/template, which escapes every field of a
// claim (a claim is untrusted input).
package dlqweb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"
)

// EnvToken names the environment variable holding the token that any
// address other than loopback needs.
const EnvToken = "EAIMQ_DLQ_TOKEN"

// MaxBody is the largest edited claim accepted, publish's default -max-bytes.
const MaxBody = 1 << 20

// Group is the dead letters of one recorded reason.
type Group struct {
	ID       string // stable across reloads: a hash of the reason and status
	Reason   string // the store's word: rejected, failed-twice, no-id, ...
	Status   int    // the last HTTP status on record (0: none)
	Sentence string // the recorded sentence ("rejected by the claim system")
	Answer   string // the partner's answer to the first of them
	Count    int
	First    time.Time // dead-lettered first and last (x-death time)
	Last     time.Time
	Claims   []Ref // the first MaxListed of them
}

// MaxListed is how many claim ids a group lists: the page of a DLQ of
// 100,000 stays a page.
const MaxListed = 200

// Ref is one dead letter in a list.
type Ref struct {
	Key     string // what actions name it by: message_id, guid or sha256: key
	ClaimID string
	Edited  bool
	Replays int64
}

// Overview is what the groups page shows.
type Overview struct {
	Groups []Group
	Total  int // claim.dead's messages when the walk started
	Looked int
}

// Field is one name and value, for properties and headers.
type Field struct {
	Name, Value string
	Depth       int // nesting, for headers that are tables
}

// Attempt is one row of the store's attempt log.
type Attempt struct {
	At          time.Time
	Redelivered bool
	Status      int
	Action      string
	Reason      string
	Latency     time.Duration
	Error       string
}

// Claim is one dead letter in full.
type Claim struct {
	Ref
	GroupID    string
	Why        string  // reason and sentence
	Record     string  // the store's record in one line ("" without one)
	Properties []Field // AMQP properties
	Headers    []Field // AMQP headers, x-death included
	XDeath     []Field // x-death alone
	Edit       []Field // the edit header of an edited copy
	Body       string  // the body, formatted when it is JSON
	BodyRaw    string  // the body as it is, for the edit form
	Editable   bool    // UTF-8 and not clipped: it can be edited in a browser
	NotUTF8    bool
	History    []Attempt
	Failures   int // repeated failures: failed attempts on record
}

// Target names what an action acts on: one dead letter or one group.
type Target struct {
	ID    string
	Group string
}

// Report is what an action did.
type Report struct {
	Action    string // retry, purge, edit
	Replayed  int
	Delivered int // skipped as delivered
	Again     int // skipped as replayed already in this run
	Refused   int // over -max-replays or refused by the broker
	Purged    int
	Arrived   int      // dead letters that arrived in claim.dead while it ran
	Lines     []string // what happened to each, in the CLI's words
	NotFound  bool     // the target was not in claim.dead
}

// ErrInvalid wraps why an edited claim cannot be published: the page shows
// it beside the form, and nothing was done.
var ErrInvalid = errors.New("invalid claim")

// Backend is dlq: every read and action of the page.
type Backend interface {
	Overview(ctx context.Context) (Overview, error)
	// Claim returns the dead letter id; found is false when claim.dead
	// holds none.
	Claim(ctx context.Context, id string) (c Claim, found bool, err error)
	Retry(ctx context.Context, t Target) (Report, error)
	Purge(ctx context.Context, t Target) (Report, error)
	// CheckEdit says why body cannot replace the body of dead letter id
	// (an error wrapping ErrInvalid), or nil.
	CheckEdit(id string, body []byte) error
	EditRetry(ctx context.Context, id string, body []byte) (Report, error)
}

// Config is one page.
type Config struct {
	Addr     string // where it listens; not loopback needs Token
	Token    string // EAIMQ_DLQ_TOKEN: "" on loopback means none
	ReadOnly bool
	Refresh  time.Duration // the groups page reloads this often (0: never)
	Backend  Backend
	// Clean takes secrets (the store's location, a broker URL's
	// password) out of an error's text before the page shows it.
	Clean func(string) string
	Log   io.Writer // errors, for whoever runs it
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
// needs a token.
func Check(c Config) error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("-addr %q: want host:port, such as 127.0.0.1:8088", c.Addr)
	}
	if !Loopback(c.Addr) && c.Token == "" {
		return fmt.Errorf("-addr %s is not loopback: anyone who reaches it could replay and purge claims; "+
			"set %s to a secret token (or listen on 127.0.0.1)", c.Addr, EnvToken)
	}
	if c.Token != "" && len(c.Token) < 16 {
		return fmt.Errorf("%s is shorter than 16 characters: too easy to guess", EnvToken)
	}
	return nil
}
