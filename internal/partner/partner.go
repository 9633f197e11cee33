// Package partner is the consumer's HTTP client of the claim system: it
// posts one claim and reports the answer as it came (status, the start of
// the body, the transport error, the latency, a Retry-After), and probes
// whether the claim system answers at all. What an answer means for the
// claim is decided elsewhere (claim.Decide); this package only talks.
package partner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"eaimq/internal/retry"
)

// Client posts claims to the claim system.
type Client struct {
	client  *http.Client
	url     string // .../v1/claims
	timeout time.Duration
}

// New makes a client of claimsURL (the claim system's .../v1/claims) for
// up to conns calls at once, each bounded by timeout.
func New(claimsURL string, conns int, timeout time.Duration) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Keep at least one idle connection per concurrent call, or every call
	// past the second opens a new TCP connection.
	tr.MaxIdleConns = max(conns, 2) * 2
	tr.MaxIdleConnsPerHost = max(conns, 2)
	tr.DisableCompression = true
	return &Client{
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

// URL is the claims URL the client posts to.
func (p *Client) URL() string { return p.url }

// Answer is what one call got.
type Answer struct {
	Status  int    // 0 when there was no answer
	Excerpt string // start of the response body, or the transport error
	Err     error
	Latency time.Duration
	// RetryAfter is a 429's or 503's Retry-After (0 when none): with
	// --retry-delays, the claim is not retried sooner.
	RetryAfter time.Duration
}

// Post sends body unchanged, with key as its Idempotency-Key (Key: the
// message_id, or an edited copy's own key). The key (IETF httpapi draft)
// lets a partner that honours it make harmless the one window we cannot
// close: it answered 201 and we died before recording it.
//
// traceparent, when the message carried a valid W3C one, is forwarded as
// it is, so that the partner's traces join the publisher's.
func (p *Client) Post(ctx context.Context, body []byte, contentType, key, traceparent string) Answer {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return Answer{Err: err, Excerpt: err.Error()}
	}
	if contentType == "" {
		contentType = "application/json"
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Idempotency-Key", key)
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
		return Answer{Err: err, Excerpt: p.describe(err), Latency: time.Since(start)}
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	// Read the rest (bounded) so the connection goes back to the pool.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	a := Answer{Status: resp.StatusCode, Excerpt: Excerpt(head), Latency: time.Since(start)}
	if a.Status == http.StatusTooManyRequests || a.Status == http.StatusServiceUnavailable {
		a.RetryAfter = retry.RetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return a
}

// Probe asks whether the claim system answers at all (--pause-when-down):
// a GET of the claims URL, whose status does not matter, only that an HTTP
// answer came. No claim is sent.
func (p *Client) Probe(ctx context.Context) error {
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
func (p *Client) describe(err error) string {
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
	return Excerpt([]byte(err.Error()))
}

// Excerpt is the first 200 bytes of b on one line.
func Excerpt(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
