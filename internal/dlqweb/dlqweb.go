// Package dlqweb is dlq serve's web page: the dead letters of claim.dead
// grouped by their recorded reason, one claim in full, and the actions of
// the people who fix failed claims (retry, purge, edit and retry), each
// behind a confirmation and a CSRF token.
//
// It knows nothing of AMQP or of the store: every read and every action is
// a call to a Backend, which dlq implements with the very functions its
// commands run, so that the page is exactly as safe as the command line.
// This package adds what a web page needs to be safe: it binds to loopback
// unless a token guards it (Check), answers 401 to anything without the
// token, refuses every action when read-only (even a POST made by hand),
// checks a CSRF token and the browser's cross-origin headers on every
// POST, and renders through html/template, which escapes every field of a
// claim (a claim is untrusted input).
package dlqweb

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
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

//go:embed templates/*.html
var files embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05")
	},
	"indent": func(n int) string { return strings.Repeat("\u00a0\u00a0", n) },
	"minus":  func(a, b int) int { return a - b },
}).ParseFS(files, "templates/*.html"))

type server struct {
	Config
	csrf    string // the token every form carries
	session string // the cookie's value once the token was given
}

const cookieName = "eaimq_dlq"

// New returns the page's handler; c must pass Check.
func New(c Config) (http.Handler, error) {
	if err := Check(c); err != nil {
		return nil, err
	}
	if c.Clean == nil {
		c.Clean = func(s string) string { return s }
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	s := &server{Config: c, csrf: mac(secret, "csrf")}
	if c.Token != "" {
		// The cookie proves the token was given without being the token.
		s.session = mac([]byte(c.Token), "session")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.groups)
	mux.HandleFunc("GET /claim", s.claim)
	mux.HandleFunc("GET /confirm", s.confirm)
	mux.HandleFunc("POST /action", s.action)
	mux.HandleFunc("POST /edit", s.edit)
	mux.HandleFunc("POST /login", s.login)
	// Browsers send Sec-Fetch-Site or Origin with every POST: a POST from
	// another site is refused before any handler runs, the CSRF token
	// covers clients that send neither.
	cop := http.NewCrossOriginProtection()
	return s.guard(cop.Handler(mux)), nil
}

func mac(key []byte, what string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(what))
	return hex.EncodeToString(h.Sum(nil))
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// guard answers 401 to every request without the token (when there is
// one), and, without a token, to a Host that is not loopback: a page on
// loopback must not be reachable through a DNS name that rebinds to it.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-store")
		if s.Token == "" {
			if !loopbackHost(r.Host) {
				http.Error(w, "dlq serve listens on loopback: use http://127.0.0.1 or http://localhost", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodPost && r.URL.Path == "/login" {
			next.ServeHTTP(w, r)
			return
		}
		if s.authorized(r) {
			next.ServeHTTP(w, r)
			return
		}
		s.unauthorized(w, "")
	})
}

func (s *server) authorized(r *http.Request) bool {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(tok, s.Token) {
		return true
	}
	c, err := r.Cookie(cookieName)
	return err == nil && equal(c.Value, s.session)
}

func (s *server) unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="dlq"`)
	s.render(w, http.StatusUnauthorized, "login.html", map[string]any{"Error": msg})
}

// loopbackHost: a Host header, with or without its port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return loopbackName(host)
}

func (s *server) login(w http.ResponseWriter, r *http.Request) {
	if s.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if !equal(r.PostFormValue("token"), s.Token) {
		s.unauthorized(w, "wrong token")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.session, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// page is what every template gets.
type page struct {
	Title    string
	ReadOnly bool
	CSRF     string
	Refresh  int // seconds; 0: none
	Error    string
	Data     any
}

func (s *server) render(w http.ResponseWriter, status int, name string, p any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := pages.ExecuteTemplate(w, name, p); err != nil {
		fmt.Fprintf(s.Log, "dlq serve: render %s: %v\n", name, err)
	}
}

func (s *server) page(title string, data any) page {
	return page{Title: title, ReadOnly: s.ReadOnly, CSRF: s.csrf, Data: data}
}

// fail shows an error of the backend, cleaned of secrets.
func (s *server) fail(w http.ResponseWriter, status int, err error) {
	msg := s.Clean(err.Error())
	fmt.Fprintf(s.Log, "dlq serve: %s\n", msg)
	p := s.page("Error", nil)
	p.Error = msg
	s.render(w, status, "error.html", p)
}

func (s *server) groups(w http.ResponseWriter, r *http.Request) {
	o, err := s.Backend.Overview(r.Context())
	if err != nil {
		s.fail(w, http.StatusBadGateway, err)
		return
	}
	p := s.page("Dead letters", o)
	p.Refresh = int(s.Refresh / time.Second)
	s.render(w, http.StatusOK, "groups.html", p)
}

func (s *server) claim(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	s.showClaim(w, r, id, "", "", http.StatusOK)
}

// showClaim renders the claim page, with an edit refused (draft and why)
// when there is one.
func (s *server) showClaim(w http.ResponseWriter, r *http.Request, id, draft, why string, status int) {
	if id == "" {
		s.fail(w, http.StatusBadRequest, errors.New("no claim named: /claim?id=ID"))
		return
	}
	c, found, err := s.Backend.Claim(r.Context(), id)
	if err != nil {
		s.fail(w, http.StatusBadGateway, err)
		return
	}
	if !found {
		s.fail(w, http.StatusNotFound, fmt.Errorf("no dead letter with id %q in claim.dead (retried, purged, or taken meanwhile)", id))
		return
	}
	if draft == "" {
		draft = c.Body
	}
	p := s.page("Claim "+c.Key, map[string]any{"Claim": c, "Draft": draft})
	p.Error = why
	s.render(w, status, "claim.html", p)
}

// actions are what /confirm and /action know.
var actions = map[string]string{"retry": "Retry", "purge": "Purge"}

func target(get func(string) string) (Target, error) {
	t := Target{ID: get("id"), Group: get("group")}
	if (t.ID == "") == (t.Group == "") {
		return t, errors.New("name one claim (id) or one group (group)")
	}
	return t, nil
}

func (s *server) readOnly(w http.ResponseWriter) bool {
	if s.ReadOnly {
		// Checked before anything else of an action, the CSRF token
		// included: no request reaches the backend's actions.
		http.Error(w, "dlq serve runs with -read-only: no action is possible", http.StatusForbidden)
	}
	return s.ReadOnly
}

func (s *server) confirm(w http.ResponseWriter, r *http.Request) {
	if s.readOnly(w) {
		return
	}
	q := r.URL.Query()
	verb, ok := actions[q.Get("action")]
	t, err := target(q.Get)
	if !ok {
		err = fmt.Errorf("unknown action %q: retry or purge", q.Get("action"))
	}
	if err != nil {
		s.fail(w, http.StatusBadRequest, err)
		return
	}
	what := "claim " + t.ID
	if t.Group != "" {
		o, err := s.Backend.Overview(r.Context())
		if err != nil {
			s.fail(w, http.StatusBadGateway, err)
			return
		}
		what = "the group (not found: it may be empty now)"
		for _, g := range o.Groups {
			if g.ID == t.Group {
				what = fmt.Sprintf("the group %q (%d dead letters now)", groupName(g), g.Count)
			}
		}
	}
	s.render(w, http.StatusOK, "confirm.html", s.page(verb+"?", map[string]any{
		"Action": q.Get("action"), "Verb": verb, "Target": t, "What": what}))
}

func groupName(g Group) string {
	if g.Status != 0 {
		return fmt.Sprintf("%s %d", g.Reason, g.Status)
	}
	return g.Reason
}

// posted checks what every POST must carry: the CSRF token.
func (s *server) posted(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, MaxBody+64<<10)
	if err := r.ParseForm(); err != nil {
		s.fail(w, http.StatusRequestEntityTooLarge, fmt.Errorf("form: %w", err))
		return false
	}
	if !equal(r.PostForm.Get("csrf"), s.csrf) {
		http.Error(w, "missing or stale form token: reload the page and try again", http.StatusForbidden)
		return false
	}
	return true
}

func (s *server) action(w http.ResponseWriter, r *http.Request) {
	if s.readOnly(w) || !s.posted(w, r) {
		return
	}
	t, err := target(r.PostForm.Get)
	if err != nil {
		s.fail(w, http.StatusBadRequest, err)
		return
	}
	var rep Report
	switch r.PostForm.Get("action") {
	case "retry":
		rep, err = s.Backend.Retry(detached(r), t)
	case "purge":
		rep, err = s.Backend.Purge(detached(r), t)
	default:
		s.fail(w, http.StatusBadRequest, fmt.Errorf("unknown action %q: retry or purge", r.PostForm.Get("action")))
		return
	}
	s.report(w, rep, err)
}

// detached is the context of an action: a browser that goes away (a
// closed tab, a reload) does not stop it halfway, so that what it did is
// whole and its report is in the log. Stopping dlq serve still stops it:
// Shutdown waits for it, and a process that ends returns every dead letter
// not acked to claim.dead.
func detached(r *http.Request) context.Context { return context.WithoutCancel(r.Context()) }

func (s *server) report(w http.ResponseWriter, rep Report, err error) {
	p := s.page("Done", rep)
	status := http.StatusOK
	if err != nil {
		// What was done before the error is in rep, and shown.
		p.Error = s.Clean(err.Error())
		fmt.Fprintf(s.Log, "dlq serve: %s\n", p.Error)
		status = http.StatusBadGateway
	}
	s.render(w, status, "report.html", p)
}

// edit is edit and retry, in two steps: "check" validates the body and
// asks for confirmation, "go" republishes it.
func (s *server) edit(w http.ResponseWriter, r *http.Request) {
	if s.readOnly(w) || !s.posted(w, r) {
		return
	}
	id, body := r.PostForm.Get("id"), r.PostForm.Get("body")
	if err := s.Backend.CheckEdit(id, []byte(body)); err != nil {
		if errors.Is(err, ErrInvalid) {
			s.showClaim(w, r, id, body, s.Clean(err.Error()), http.StatusBadRequest)
		} else {
			s.fail(w, http.StatusBadRequest, err)
		}
		return
	}
	if r.PostForm.Get("step") != "go" {
		s.render(w, http.StatusOK, "confirm-edit.html", s.page("Retry the edited claim?", map[string]any{"ID": id, "Body": body}))
		return
	}
	rep, err := s.Backend.EditRetry(detached(r), id, []byte(body))
	if errors.Is(err, ErrInvalid) {
		s.showClaim(w, r, id, body, s.Clean(err.Error()), http.StatusBadRequest)
		return
	}
	s.report(w, rep, err)
}
