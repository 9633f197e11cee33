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
	"eaimq/internal/dlqcli"
	"eaimq/internal/dlqweb"
	"eaimq/internal/fail"
	"eaimq/internal/metrics"
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
	// The editor's file goes where TMPDIR says, as os.TempDir reads it,
	// but through getenv like every other variable (a test's own
	// directory, not the machine's /tmp).
	c.dlq.Edit.Dir = getenv("TMPDIR")
	if c.cmd == "history" || (acts(c) && !c.noStore) {
		trail, err := audit.Open(ctx, store.Path(getenv))
		if err != nil {
			return fail.Errorf(fail.IO, "%v\n  every replay, edit and purge is written to the audit trail; nothing was done", err)
		}
		defer trail.Close()
		c.dlq.Audit = trail
		if c.cmd == "history" {
			return dlqcli.History(ctx, trail, c.dlq, stdout, stderr)
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
	ingested, err := dlq.Ingested(ctx, st)
	if err != nil {
		return fail.Errorf(fail.IO, "look for ingested dead letters in the store %s: %v", st.Path(), err)
	}
	if st != nil && ((ingested > 0 && !c.queue && acts(c)) || (c.cmd == "serve" && (c.ingest || ingested > 0))) {
		// Over ingested rows an action is a change of the rows' states:
		// the store opened for writing (list and show keep reading it
		// read-only). Not without ingestion: the lab's file is left as
		// the consumer wrote it.
		rw, err := store.Open(store.Path(getenv), store.Options{})
		if err != nil {
			return fail.Errorf(fail.IO, "%v\n  %s changes the ingested dead letters' rows in the store; nothing was done", err, c.cmd)
		}
		defer rw.Close()
		st = rw
	}
	c.pace(ingested)
	writable := st != nil && (c.ingest || ingested > 0)
	if c.cmd == "serve" && c.ingest {
		return serveIngesting(ctx, c, getenv, st, stdout, stderr)
	}
	if c.cmd == "serve" {
		return dlqweb.Serve(ctx, getenv, st, writable, c.tokens, c.dlq, stdout, stderr)
	}

	conn, err := dlq.Dial(ctx, getenv)
	if err != nil {
		return err
	}
	defer broker.Close(conn)
	newBrowser := dlq.NewBrowser
	archive := c.cmd == "restore" || c.dlq.Archive // the purged dead letters
	switch {
	case ingested > 0 && !c.queue && archive:
		newBrowser = dlq.NewIngestedArchiveBrowser
	case ingested > 0 && !c.queue:
		newBrowser = dlq.NewIngestedBrowser
	case archive:
		newBrowser = dlq.NewArchiveBrowser
	case ingested > 0:
		fmt.Fprintf(stderr, "dlq: -queue: %s acts on what %s still holds; the dead letters ingested into the store are left as they are\n",
			c.cmd, topo.DeadQueue)
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
		return dlqcli.List(ctx, b, c.dlq, stdout, stderr)
	case "show":
		return dlqcli.Show(ctx, b, c.dlq, stdout)
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
		m := metrics.NewIngest()
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
	// The page reads the ingested rows once there are some: say so once,
	// so that a shrinking claim.dead is not taken for claims gone.
	fmt.Fprintf(stderr, "dlq: serve -ingest: the page shows the dead letters ingested into the store (what %s still holds until the first is)\n", topo.DeadQueue)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := ingest(ctx, c, getenv, stderr)
		cancel()
		done <- err
	}()
	err := dlqweb.Serve(ctx, getenv, st, st != nil, c.tokens, c.dlq, stdout, stderr)
	cancel()
	if ierr := <-done; ierr != nil {
		return ierr
	}
	return err
}

// pace leaves -rate as given, or its default over ingested rows; the
// queue's replays (the command's and the page's) keep the lab's pace,
// which is none: pacing is for the ingested rows of an incident
// (defaultRate).
func (c *config) pace(ingested int64) {
	overRows := (ingested > 0 && !c.queue) || (c.cmd == "serve" && c.ingest)
	if !c.rateSet && !overRows {
		c.dlq.Rate = 0
	}
}
