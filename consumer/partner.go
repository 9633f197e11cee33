package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"eaimq/internal/redact"
	"eaimq/internal/retry"
)

// partner posts claims to the claim system.
type partner struct {
	client  *http.Client
	url     string // .../v1/claims
	timeout time.Duration
}

// claimsURL makes <base>/v1/claims from the --claim value, with or without a
// trailing slash, and accepts a value that already ends in /v1/claims.
func claimsURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return "", fmt.Errorf("--claim %s is not an http(s) URL with a host (example: http://127.0.0.1:9202)", redact.URL(base))
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("--claim %s: port %s is not from 1 to 65535", redact.URL(base), p)
		}
	}
	u.Path = strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(u.Path, "/v1/claims") {
		u.Path += "/v1/claims"
	}
	u.RawPath = ""
	return u.String(), nil
}

func newPartner(claimsURL string, conns int, timeout time.Duration) *partner {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Keep at least one idle connection per concurrent call, or every call
	// past the second opens a new TCP connection.
	tr.MaxIdleConns = max(conns, 2) * 2
	tr.MaxIdleConnsPerHost = max(conns, 2)
	tr.DisableCompression = true
	return &partner{
		client: &http.Client{
			Transport: tr,
			Timeout:   timeout,
			// A redirect on a POST is an answer to report, not to follow.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		url:     claimsURL,
		timeout: timeout,
	}
}

// answer is what one call got.
type answer struct {
	status  int    // 0 when there was no answer
	excerpt string // start of the response body, or the transport error
	err     error
	latency time.Duration
	// retryAfter is a 429's or 503's Retry-After (0 when none): with
	// --retry-delays, the claim is not retried sooner.
	retryAfter time.Duration
}

// post sends body unchanged. The Idempotency-Key (IETF httpapi draft) lets a
// partner that honours it make harmless the one window we cannot close: it
// answered 201 and we died before recording it.
//
// traceparent, when the message carried a valid W3C one, is forwarded as
// it is, so that the partner's traces join the publisher's.
func (p *partner) post(ctx context.Context, body []byte, contentType, id, traceparent string) answer {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return answer{err: err, excerpt: err.Error()}
	}
	if contentType == "" {
		contentType = "application/json"
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Idempotency-Key", id)
	if traceparent != "" {
		req.Header.Set("Traceparent", traceparent)
	}
	// net/http re-sends a request on a new connection, without a word,
	// when a reused one broke before the answer, if it thinks the request
	// idempotent, and a POST with an Idempotency-Key header counts as such.
	// The partner would then see a call that neither the store nor the log
	// ever counts. Without GetBody the body cannot be replayed, so each
	// call is sent once and a broken connection is an answer we record.
	req.GetBody = nil
	resp, err := p.client.Do(req)
	if err != nil {
		return answer{err: err, excerpt: p.describe(err), latency: time.Since(start)}
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	// Read the rest (bounded) so the connection goes back to the pool.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	a := answer{status: resp.StatusCode, excerpt: excerpt(head), latency: time.Since(start)}
	if a.status == http.StatusTooManyRequests || a.status == http.StatusServiceUnavailable {
		a.retryAfter = retry.RetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return a
}

// probe asks whether the claim system answers at all (--pause-when-down):
// a GET of the claims URL, whose status does not matter, only that an HTTP
// answer came. No claim is sent.
func (p *partner) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, min(p.timeout, 5*time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return nil
}

// describe shortens a transport error to what an operator needs.
func (p *partner) describe(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("timeout after %s", p.timeout)
	}
	return excerpt([]byte(err.Error()))
}

// excerpt is the first 200 bytes of b on one line.
func excerpt(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
