package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"eaimq/internal/claimsys"
	"eaimq/internal/cli"
	"eaimq/internal/fail"
)

// doc is the manual: the package comment in doc.go, printed by -h, so
// that the manual and -h cannot drift apart (as cmd/digraph does).
//
//go:embed doc.go
var doc string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	cli.Report(os.Stderr, "claimsys", err)
	os.Exit(cli.Code(err))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, stdout, stderr)
	if err != nil {
		return err
	}
	if cfg.stats {
		return printStats(ctx, cfg.addr, cfg.json, stdout)
	}
	return serve(ctx, cfg, stdout)
}

// serve runs the stand-in on cfg.addr until ctx ends.
func serve(ctx context.Context, cfg config, stdout io.Writer) error {
	srv := claimsys.New()
	ms := int(cfg.delay.Milliseconds())
	srv.Set(claimsys.Control{DelayMS: &ms, ForceStatus: &cfg.force, Flap: &cfg.flap, IdempotencyDraft: &cfg.draft})
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fail.Errorf(fail.Failed, "listen on %s: %w", cfg.addr, err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "claimsys: listening on http://%s (POST /v1/claims, GET /_stats, POST /_control, GET /healthz)\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fail.New(fail.Failed, err)
	case <-ctx.Done():
	}
	// A call held at the gate would keep Shutdown waiting: a stop answers
	// it, as a partner going down gracefully finishes what it took.
	srv.Release()
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fail.New(fail.Failed, err)
	}
	return nil
}

// printStats prints the counts of the claimsys at addr: one line per claim
// and the totals, or with raw the body of GET /_stats itself.
func printStats(ctx context.Context, addr string, raw bool, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/_stats", nil)
	if err != nil {
		return fail.New(fail.Usage, err)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return fail.Errorf(fail.Unavailable, "no claimsys answers at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fail.Errorf(fail.Failed, "read stats from %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fail.Errorf(fail.Failed, "read stats from %s: GET /_stats answered %s", addr, resp.Status)
	}
	var st claimsys.Stats
	if err := json.Unmarshal(body, &st); err != nil {
		return fail.Errorf(fail.Failed, "read stats from %s: %w", addr, err)
	}
	if raw {
		// The body as it came, so that a field this program does not
		// know is there too; only the newline a line-reader wants added.
		body = bytes.TrimRight(body, "\n")
		_, err := fmt.Fprintf(w, "%s\n", body)
		return err
	}
	guids := make([]string, 0, len(st.ByGuid))
	for g := range st.ByGuid {
		guids = append(guids, g)
	}
	sort.Strings(guids)
	for _, g := range guids {
		fmt.Fprintf(w, "%s %d %d %d\n", g, st.ByGuid[g], st.Accepted[g], st.LastStatus[g])
	}
	fmt.Fprintf(w, "# total %d, max concurrency %d, idempotency-key repeats %d\n", st.Total, st.MaxConcurrency, st.Absorbable)
	if d := st.Draft; d != (claimsys.KeyCounts{}) {
		fmt.Fprintf(w, "# idempotency draft: %d reused (422), %d in progress (409), %d replayed\n", d.Reused, d.InProgress, d.Replayed)
	}
	return nil
}
