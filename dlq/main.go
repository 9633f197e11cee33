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
			return fail.Errorf(fail.IO, "%v\n  %s reads the store to know what it selects and what was delivered; without it every dead letter\n"+
				"  looks unknown. Set EAI_MQ_DB to the consumer's store, or add -no-store if there really is none; nothing was done", err, c.cmd)
		case err != nil:
			fmt.Fprintf(stderr, "dlq: warning: %v; our reasons show as unknown\n", err)
		default:
			defer st.Close()
		}
	}
	if c.cmd == "serve" {
		return dlq.Serve(ctx, getenv, st, c.dlq, stdout, stderr)
	}

	conn, err := dlq.Dial(ctx, getenv)
	if err != nil {
		return err
	}
	defer broker.Close(conn)
	newBrowser := dlq.NewBrowser
	if c.cmd == "restore" || c.dlq.Archive {
		newBrowser = dlq.NewArchiveBrowser // the purged dead letters
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
