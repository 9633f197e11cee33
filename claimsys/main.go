// Claimsys runs the stand-in for the partner's claim system, with the lab
// fixture's behaviour, for the demo and for people trying the consumer.
//
// Usage:
//
//	claimsys [-addr 127.0.0.1:9202] [-delay 0] [-force-status 0] [-flap]
//	claimsys -stats [-addr 127.0.0.1:9202]
//
// -stats asks a running claimsys for its counts and prints one line per
// claim (guid, calls, 201s, last status) and the totals, for scripts and
// people without curl and jq.
//
// Endpoints:
//
//	POST /v1/claims  docs empty → 422; claimId starting BUSY → 503; else 201
//	GET  /_stats     {"total", "by_guid", "by_claim_id", "by_status",
//	                  "max_concurrency", "idempotency_key_repeats", ...}
//	POST /_control   {"delay_ms":50, "force_status":503, "flap":true,
//	                  "honour_idempotency_key":true, "reset":true}
//
// Exit status: 0 after SIGINT or SIGTERM, 2 usage, 1 when it cannot listen.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
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
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	cli.Report(os.Stderr, "claimsys", err)
	os.Exit(cli.Code(err))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("claimsys", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9202", "listen `address`")
	delay := fs.Duration("delay", 0, "`delay` before answering each claim")
	force := fs.Int("force-status", 0, "answer every claim with this `status` (0: the fixture's rules)")
	flap := fs.Bool("flap", false, "alternate 503 and 201 on every call")
	stats := fs.Bool("stats", false, "print the counts of the claimsys running at -addr, and exit")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	if *stats {
		return printStats(ctx, *addr, stdout)
	}
	srv := claimsys.New()
	ms := int(delay.Milliseconds())
	srv.Set(claimsys.Control{DelayMS: &ms, ForceStatus: force, Flap: flap})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "claimsys: listening on http://%s (POST /v1/claims, GET /_stats)\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func printStats(ctx context.Context, addr string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/_stats", nil)
	if err != nil {
		return cli.Exit(cli.ExitUsage, err)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return cli.Exit(cli.ExitUnavailable, fmt.Errorf("no claimsys answers at %s: %w", addr, err))
	}
	defer resp.Body.Close()
	var st claimsys.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return fmt.Errorf("read stats from %s: %w", addr, err)
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
	return nil
}
