package metrics

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MinToken is the shortest --metrics-token-file token accepted: shorter
// is too easy to guess (the same floor as dlq serve's tokens).
const MinToken = 16

// Serve listens on addr and serves /metrics, /healthz (the process
// answers) and /readyz (Live.Ready says so: 200, else 503 with the
// reason), until ctx ends. The listen happens before it returns, so that
// a port in use is an error at start, not a line in the log later.
// It returns the address it listens on (port 0 picks one).
//
// With a tokenFile (--metrics-token-file), /metrics answers only a request
// with "Authorization: Bearer TOKEN", the file's token; others get 401.
// /healthz and /readyz stay open: a load balancer or a probe judges by
// their status alone and should not have to hold the secret, and they
// say nothing but ok, ready, or a fixed reason. /metrics is what carries
// the vhost, the build and the counts of claims.
func (m *Consumer) Serve(ctx context.Context, addr, tokenFile string) (listening string, stop func(), err error) {
	metrics, err := Handler(m.reg, tokenFile)
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := m.live.Ready(); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", why)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return Listen(ctx, "--metrics-addr", addr, mux)
}

// Handler is reg's /metrics, behind tokenFile's bearer token when one is
// given (see Serve).
func Handler(reg *prometheus.Registry, tokenFile string) (http.Handler, error) {
	var h http.Handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	if tokenFile == "" {
		return h, nil
	}
	tok, err := ReadToken(tokenFile)
	if err != nil {
		return nil, err
	}
	return bearer(tok, h), nil
}

// Listen serves h on addr (flag names the setting, for the error) until
// stop, which waits at most 2 s for the requests in hand. The listen
// happens before it returns, so that a port in use is an error at start,
// not a line in the log later; port 0 picks one, and listening says which.
func Listen(ctx context.Context, flag, addr string, h http.Handler) (listening string, stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(l) // ends with ErrServerClosed at stop
	}()
	return l.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		<-done
	}, nil
}

// ReadToken reads the token of --metrics-token-file: the file's content
// without the white space around it, as Prometheus reads the
// credentials_file it sends. The file holds a secret, so it must be
// readable by its owner only. No error shows the token.
func ReadToken(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--metrics-token-file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("--metrics-token-file %s can be read by others (mode %04o): it holds the token; chmod 600 %s", path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--metrics-token-file: %w", err)
	}
	tok := bytes.TrimSpace(b)
	switch {
	case len(tok) < MinToken:
		return nil, fmt.Errorf("--metrics-token-file %s holds %d characters, fewer than %d: too easy to guess (make one: head -c 24 /dev/urandom | base64 > %s)", path, len(tok), MinToken, path)
	case bytes.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		// An Authorization header cannot carry them, so no scrape could
		// ever match.
		return nil, fmt.Errorf("--metrics-token-file %s: the token has a space or a control character inside; want one word, such as base64", path)
	}
	return tok, nil
}

// bearer lets through only the requests that carry token as their
// Authorization bearer token. The comparison is of SHA-256 sums in
// constant time: neither the time taken nor an early mismatch tells a
// caller how much of a guess was right, or the token's length.
func bearer(token []byte, h http.Handler) http.Handler {
	want := sha256.Sum256(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, cred, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		got := sha256.Sum256([]byte(cred))
		// Both conditions are evaluated: no shortcut on the scheme.
		ok := subtle.ConstantTimeCompare(got[:], want[:]) == 1
		if !strings.EqualFold(scheme, "Bearer") || !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="eaimq metrics"`)
			http.Error(w, "401 unauthorized: send Authorization: Bearer with the token of --metrics-token-file", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
