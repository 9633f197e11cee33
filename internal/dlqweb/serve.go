package dlqweb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/dlq"
	"eaimq/internal/fail"
	"eaimq/internal/store"
)

// Serve runs dlq serve until ctx ends: this package's page on c.Page,
// backed by the functions the other commands run. Its status lines go to
// stdout, the page's errors to stderr.
//
// writable says st was opened for writing, as the page needs to act on
// ingested rows (Serve's caller opens it so where dead letters are
// ingested); tokens are the page's (EAIMQ_DLQ_TOKEN, EAIMQ_DLQ_TOKENS).
func Serve(ctx context.Context, getenv func(string) string, st store.Store, writable bool, tokens []Token, c dlq.Config,
	stdout, stderr io.Writer) error {
	w := &web{getenv: getenv, st: st, trail: c.Audit, c: c, log: stderr, writable: writable}
	cfg := Config{Addr: c.Page.Addr, Tokens: tokens, ReadOnly: c.Page.ReadOnly, NoArchive: c.NoArchive, Refresh: c.Page.Refresh,
		Banner: bannerOf(broker.URL(getenv)), Backend: w, Clean: w.clean, Log: stderr}
	h, err := New(cfg)
	if err != nil {
		return fail.Errorf(fail.Usage, "%v", err)
	}
	// The broker and claim.dead are checked once before listening, so that
	// a wrong URL or a missing topology is an exit code, not a page of errors.
	if err := w.session(ctx, func(*dlq.Browser) error { return nil }); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Page.Addr)
	if err != nil {
		return fail.Errorf(fail.Config, "-addr %s: %v; choose another -addr", c.Page.Addr, err)
	}
	mode := ""
	if c.Page.ReadOnly {
		mode = " (read-only)"
	}
	fmt.Fprintf(stdout, "dlq: serving http://%s/%s; Ctrl-C stops\n", ln.Addr(), mode)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		// An action under way finishes (its dead copies are acked after
		// their confirms, or stay); new requests are refused.
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	err = srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil // stopping the page is its normal end
	}
	return fail.New(fail.Config, err)
}
