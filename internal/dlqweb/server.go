package dlqweb

import (
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
