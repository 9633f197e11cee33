package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"eaimq/internal/audit"
	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/dlq"
	"eaimq/internal/fail"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// doc is the manual: -h prints its package comment, so that the manual and
// the package documentation are one text.
//
//go:embed doc.go
var doc string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	cli.Report(os.Stderr, "dlq", err)
	os.Exit(cli.Code(err))
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseConfig(args, getenv, stdout, stderr)
	if err != nil {
		return err
	}
	c.dlq.Edit.Stdin = os.Stdin
	return execute(ctx, c, getenv, stdout, stderr)
}

// acts says whether cmd changes claim.dead, and so writes the audit trail.
func acts(c config) bool {
	switch c.cmd {
	case "replay", "edit", "serve", "restore":
		return true
	case "purge":
		return c.dlq.Yes
	}
	return false
}

// execute runs the command of c: it opens the store and the audit trail,
// dials the broker and hands them to the engine.
func execute(ctx context.Context, c config, getenv func(string) string, stdout, stderr io.Writer) error {
	if c.cmd == "ingest" {
		return ingest(ctx, c, getenv, stderr)
	}
	c.dlq.Actor = dlq.Actor{Who: audit.OSUser(), Via: "dlq " + c.cmd}
	c.dlq.Edit.Editor = dlq.Editor(getenv)
	if c.cmd == "history" || (acts(c) && !c.noStore) {
		trail, err := audit.Open(ctx, store.Path(getenv))
		if err != nil {
			return fail.Errorf(fail.IO, "%v\n  every replay, edit and purge is written to the audit trail; nothing was done", err)
		}
		defer trail.Close()
		c.dlq.Audit = trail
		if c.cmd == "history" {
			return dlq.History(ctx, trail, c.dlq, stdout, stderr)
		}
	}
	var st store.Store
	if !c.noStore {
		var err error
		st, err = store.Open(store.Path(getenv), store.Options{ReadOnly: true})
		switch {
		case err != nil && c.cmd != "list" && c.cmd != "show":
			return fail.Errorf(fail.IO, "%w\n  %s reads the store to know what it selects and what was delivered; without it every dead letter\n"+
				"  looks unknown. Set EAI_MQ_DB to the consumer's store, or add -no-store if there really is none; nothing was done", err, c.cmd)
		case err != nil:
			fmt.Fprintf(stderr, "dlq: warning: %v; our reasons show as unknown\n", err)
		default:
			defer st.Close()
		}
	}
	if c.cmd == "serve" && c.ingest {
		return serveIngesting(ctx, c, getenv, st, stdout, stderr)
	}
	if c.cmd == "serve" {
		return dlq.Serve(ctx, getenv, st, c.dlq, stdout, stderr)
	}
	ingested, err := dlq.HasIngested(ctx, st)
	if err != nil {
		return fail.Errorf(fail.IO, "read the ingested dead letters in the store %s: %v", st.Path(), err)
	}

	conn, err := dlq.Dial(ctx, getenv)
	if err != nil {
		return err
	}
	defer broker.Close(conn)
	newBrowser := dlq.NewBrowser
	switch {
	case c.cmd == "restore" || c.dlq.Archive:
		newBrowser = dlq.NewArchiveBrowser // the purged dead letters
	case ingested && (c.cmd == "list" || c.cmd == "show") && !c.queue:
		newBrowser = dlq.NewIngestedBrowser
	case ingested && !c.queue:
		// Replay, purge and edit from the store are not built yet: say
		// that they act on claim.dead only, so that the ingested ones
		// are not taken for gone.
		n, err := dlq.Ingested(ctx, st)
		if err != nil {
			return fail.Errorf(fail.IO, "count the ingested dead letters in the store %s: %v", st.Path(), err)
		}
		fmt.Fprintf(stderr, "dlq: warning: %d dead letter(s) were ingested into the store (dlq list shows them); %s acts on what %s still holds only\n",
			n, c.cmd, topo.DeadQueue)
	}
	b, err := newBrowser(conn, st)
	if err != nil {
		return err
	}
	b.MaxHeld = c.dlq.MaxHeld
	// Whatever happens, closing the connection (or dying) returns every
	// message not acked to claim.dead; Close also waits until they are
	// ready again, so that the next command sees them.
	defer b.Close()
	defer b.BoundNote(stderr) // the last line on stderr, before cli.Report's
	defer b.Uningested(stderr)

	switch c.cmd {
	case "list":
		return dlq.List(ctx, b, c.dlq, stdout, stderr)
	case "show":
		return dlq.Show(ctx, b, c.dlq, stdout)
	case "replay":
		return dlq.Replay(ctx, b, c.dlq, stdout, stderr)
	case "edit":
		return dlq.Edit(ctx, b, c.dlq, stdout, stderr)
	case "restore":
		return dlq.Restore(ctx, b, c.dlq, stdout, stderr)
	default:
		return dlq.Purge(ctx, b, c.dlq, stdout, stderr)
	}
}

// ingest runs dlq ingest: the store opened for writing, until a signal.
func ingest(ctx context.Context, c config, getenv func(string) string, stderr io.Writer) error {
	st, err := store.Open(store.Path(getenv), store.Options{})
	if err != nil {
		return fail.Errorf(fail.IO, "%v\n  dlq ingest writes the dead letters into the consumer's store (EAI_MQ_DB); nothing was taken", err)
	}
	defer st.Close()
	if c.metrics != "" {
		m := dlq.NewIngestMetrics()
		addr, err := m.Serve(ctx, c.metrics)
		if err != nil {
			return fail.New(fail.Config, err)
		}
		fmt.Fprintf(stderr, "dlq ingest: metrics on http://%s/metrics\n", addr)
		c.dlq.Ingest.Metrics = m
	}
	return dlq.Ingest(ctx, getenv, st, c.dlq.Ingest, stderr)
}

// serveIngesting runs the page and dlq ingest in one process: a signal
// ends both (ingest acks its last batch first); ingest failing ends the
// page too, so that its service manager restarts them together.
func serveIngesting(ctx context.Context, c config, getenv func(string) string, st store.Store, stdout, stderr io.Writer) error {
	// The page does not read the ingested dead letters yet: say so once,
	// so that a shrinking claim.dead is not taken for claims gone.
	fmt.Fprintf(stderr, "dlq: serve -ingest: the page shows what %s still holds; dlq list and dlq show read the ingested dead letters\n", topo.DeadQueue)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := ingest(ctx, c, getenv, stderr)
		cancel()
		done <- err
	}()
	err := dlq.Serve(ctx, getenv, st, c.dlq, stdout, stderr)
	cancel()
	if ierr := <-done; ierr != nil {
		return ierr
	}
	return err
}
