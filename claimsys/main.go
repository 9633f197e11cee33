package main

import (
	"bytes"
	"context"
	_ "embed"
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
	"strconv"
	"syscall"
	"time"

	"eaimq/internal/claimsys"
	"eaimq/internal/cli"
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
	fs := flag.NewFlagSet("claimsys", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9202", "listen `address`")
	delay := fs.Duration("delay", 0, "`delay` before answering each claim")
	force := fs.Int("force-status", 0, "answer every claim with this `status` (0: the fixture's rules)")
	flap := fs.Bool("flap", false, "alternate 503 and 201 on every call")
	stats := fs.Bool("stats", false, "print the counts of the claimsys running at -addr, and exit")
	asJSON := fs.Bool("json", false, "with -stats: print GET /_stats as it came, JSON")
	if err := cli.Flags(fs, doc, args, stdout); err != nil {
		return err
	}
	if err := checkFlags(fs, *addr, *delay, *force); err != nil {
		return cli.Usagef("%v", err)
	}
	if *asJSON && !*stats {
		return cli.Usagef("-json goes with -stats")
	}
	if *stats {
		return printStats(ctx, *addr, *asJSON, stdout)
	}
	srv := claimsys.New()
	ms := int(delay.Milliseconds())
	srv.Set(claimsys.Control{DelayMS: &ms, ForceStatus: force, Flap: flap})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "claimsys: listening on http://%s (POST /v1/claims, GET /_stats, POST /_control, GET /healthz)\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// A call held at the gate would keep Shutdown waiting: a stop answers
	// it, as a partner going down gracefully finishes what it took.
	srv.Release()
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// checkFlags checks the values the flag package lets through: an argument
// left over, and every number against its range.
func checkFlags(fs *flag.FlagSet, addr string, delay time.Duration, force int) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if _, port, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("-addr %q: want host:port (127.0.0.1:9202): %v", addr, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("-addr %q: the port must be a number, 0 to 65535", addr)
	}
	if delay < 0 || delay > claimsys.MaxDelay {
		return fmt.Errorf("-delay %s: want 0 to %s", delay, claimsys.MaxDelay)
	}
	if force != 0 && !claimsys.ValidStatus(force) {
		return fmt.Errorf("-force-status %d: want 0 (the fixture's rules) or an HTTP status 200 to 599", force)
	}
	return nil
}

// printStats prints the counts of the claimsys at addr: one line per claim
// and the totals, or with raw the body of GET /_stats itself.
func printStats(ctx context.Context, addr string, raw bool, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/_stats", nil)
	if err != nil {
		return cli.Exit(cli.ExitUsage, err)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return cli.Exit(cli.ExitUnavailable, fmt.Errorf("no claimsys answers at %s: %w", addr, err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read stats from %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("read stats from %s: GET /_stats answered %s", addr, resp.Status)
	}
	var st claimsys.Stats
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("read stats from %s: %w", addr, err)
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
	return nil
}
