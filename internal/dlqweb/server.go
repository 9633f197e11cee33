package dlqweb

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The handler New returns: the guard every request passes (token, loopback
// Host, security headers), the login, and rendering.

//go:embed templates/*.html
var files embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05")
	},
	"indent":  func(n int) string { return strings.Repeat("\u00a0\u00a0", n) },
	"add":     func(a, b int) int { return a + b },
	"sub":     func(a, b int) int { return a - b },
	"perPage": func() int { return PerPage },
	"first": func(refs []Ref) []Ref {
		return refs[:min(len(refs), PerGroup)]
	},
	"pageURL": func(l List, page int) string {
		v := url.Values{"page": {strconv.Itoa(page)}}
		if l.Archive {
			return "/archive?" + v.Encode()
		}
		if l.Query != "" {
			v.Set("q", l.Query)
			return "/search?" + v.Encode()
		}
		v.Set("id", l.Group.ID)
		return "/group?" + v.Encode()
	},
}).ParseFS(files, "templates/*.html"))

type server struct {
	Config
	csrf string // the token every form carries
	keys []key  // one for each token
}

// key is one token as the server holds it: its sha256 (tokens are compared
// as hashes, in constant time, so that neither a token's bytes nor its
// length leak through timing), the session cookie's value that proves it
// was given, and its name.
type key struct {
	name    string
	sum     [sha256.Size]byte
	session string
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
	for _, t := range c.Tokens {
		// The cookie proves the token was given without being the token.
		s.keys = append(s.keys, key{name: t.Name, sum: sha256.Sum256([]byte(t.Value)), session: mac([]byte(t.Value), "session")})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.groups)
	mux.HandleFunc("GET /group", s.group)
	mux.HandleFunc("GET /search", s.search)
	mux.HandleFunc("GET /archive", s.archive)
	mux.HandleFunc("GET /claim", s.claim)
	mux.HandleFunc("GET /confirm", s.confirm)
	mux.HandleFunc("POST /action", s.action)
	mux.HandleFunc("POST /edit", s.edit)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("GET /healthz", s.healthz)
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

// whoKey is the context key of the request's token name.
type whoKey struct{}

// who is the name of the token the request carried ("" without tokens).
func who(r *http.Request) string { n, _ := r.Context().Value(whoKey{}).(string); return n }

// guard answers 401 to every request without a token (when there are
// some), and, without tokens, to a Host that is not loopback: a page on
// loopback must not be reachable through a DNS name that rebinds to it.
// /healthz needs no token: it says only whether the broker and the store
// answer, for a load balancer or a monitor that holds no secret.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-store")
		if len(s.keys) == 0 {
			if !loopbackHost(r.Host) {
				http.Error(w, "dlq serve listens on loopback: use http://127.0.0.1 or http://localhost", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if (r.Method == http.MethodPost && r.URL.Path == "/login") || (r.Method == http.MethodGet && r.URL.Path == "/healthz") {
			next.ServeHTTP(w, r)
			return
		}
		if name, ok := s.authorized(r); ok {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), whoKey{}, name)))
			return
		}
		s.unauthorized(w, "")
	})
}

// authorized finds the token of the request: its Authorization bearer
// token, else its session cookie. A wrong one is logged, without its value.
func (s *server) authorized(r *http.Request) (string, bool) {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		if name, ok := s.match(tok); ok {
			return name, true
		}
		s.refused(r, "a wrong token (Authorization: Bearer)")
		return "", false
	}
	c, err := r.Cookie(cookieName)
	if err != nil {
		return "", false // not signed in yet: the login form
	}
	found := -1
	for i, k := range s.keys {
		if equal(c.Value, k.session) {
			found = i
		}
	}
	if found < 0 {
		s.refused(r, "a wrong or stale session cookie")
		return "", false
	}
	return s.keys[found].name, true
}

// match finds the token tok among the page's, comparing every one.
func (s *server) match(tok string) (string, bool) {
	sum := sha256.Sum256([]byte(tok))
	found := -1
	for i, k := range s.keys {
		if subtle.ConstantTimeCompare(sum[:], k.sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return s.keys[found].name, true
}

// refused logs a request turned away for its token: what and from where,
// never the token.
func (s *server) refused(r *http.Request, what string) {
	fmt.Fprintf(s.Log, "dlq serve: refused %s %s from %s: %s\n", r.Method, r.URL.Path, r.RemoteAddr, what)
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
	if len(s.keys) == 0 {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	name, ok := s.match(r.PostFormValue("token"))
	if !ok {
		s.refused(r, "a wrong token (the login form)")
		s.unauthorized(w, "wrong token")
		return
	}
	var session string
	for _, k := range s.keys {
		if k.name == name {
			session = k.session
		}
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: session, Path: "/", HttpOnly: true,
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
	Banner   Banner
	Who      string // the signed-in token's name
	Query    string // the search box's
	Data     any
}

func (s *server) render(w http.ResponseWriter, status int, name string, p any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := pages.ExecuteTemplate(w, name, p); err != nil {
		fmt.Fprintf(s.Log, "dlq serve: render %s: %v\n", name, err)
	}
}

func (s *server) page(r *http.Request, title string, data any) page {
	return page{Title: title, ReadOnly: s.ReadOnly, CSRF: s.csrf, Banner: s.Banner, Who: who(r), Data: data}
}

// fail shows an error of the backend, cleaned of secrets.
func (s *server) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	msg := s.Clean(err.Error())
	fmt.Fprintf(s.Log, "dlq serve: %s\n", msg)
	p := s.page(r, "Error", nil)
	p.Error = msg
	s.render(w, status, "error.html", p)
}
