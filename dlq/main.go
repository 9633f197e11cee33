package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/claim"
	"eaimq/internal/cli"
	"eaimq/internal/dlqweb"
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

// Ranges of the numeric flags.
const (
	defaultMaxReplays = 5
	maxMaxReplays     = 1000
)

type options struct {
	json       bool
	status     int
	reason     claim.Reason
	byReason   bool
	limit      int
	all        bool
	force      bool
	maxReplays int
	yes        bool
	noStore    bool
	addr       string        // serve
	readOnly   bool          // serve
	refresh    time.Duration // serve
	ids        []string
	found      map[string]bool // the IDs some dead letter answered to
}

// selects says whether m is selected by IDs, -all and the filters, and
// notes which named ID it answers to.
func (o *options) selects(m *dead) bool {
	if len(o.ids) > 0 {
		named := false
		for _, id := range o.ids {
			if id == m.Key || id == m.d.MessageId {
				o.found[id], named = true, true
			}
		}
		if !named {
			return false
		}
	}
	if o.status != 0 && (!m.Known || m.Rec.LastStatus != o.status) {
		return false
	}
	if o.byReason && m.reason() != o.reason {
		return false
	}
	return true
}

func (o *options) filtered() bool { return o.status != 0 || o.byReason }

// missing reports the named IDs no dead letter answered to, on w, and
// returns their number.
func (o *options) missing(w io.Writer, b *browser) int {
	n := 0
	for _, id := range o.ids {
		if !o.found[id] {
			n++
			fmt.Fprintf(w, "dlq: no dead letter with id %q in claim.dead%s\n", clip(esc(id, false), fieldWidth), b.beyond())
		}
	}
	return n
}

// usedBy names the commands each flag means something to.
var usedBy = map[string][]string{
	"json":        {"list", "show"},
	"status":      {"list", "replay", "purge"},
	"reason":      {"list", "replay", "purge"},
	"limit":       {"list", "show", "replay", "purge", "serve"},
	"all":         {"replay", "purge"},
	"force":       {"replay"},
	"max-replays": {"replay", "serve"},
	"yes":         {"purge"},
	"no-store":    {"list", "show", "replay", "purge", "serve"},
	"addr":        {"serve"},
	"read-only":   {"serve"},
	"refresh":     {"serve"},
}

// commands are dlq's commands, as the usage errors name them.
var commands = []string{"list", "show", "replay", "purge", "serve"}

const commandWords = "list, show, replay, purge or serve"

// defaultAddr is where serve listens: loopback, so that only this host's
// users reach the page (any other address needs EAIMQ_DLQ_TOKEN).
const defaultAddr = "127.0.0.1:8088"

// maxRefresh bounds -refresh: a page that reloads less often than this is
// not live any more.
const maxRefresh = time.Hour

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dlq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := options{found: map[string]bool{}}
	var reason string
	fs.BoolVar(&o.json, "json", false, "list, show: JSON instead of text (list: one object per line)")
	fs.IntVar(&o.status, "status", 0, "select by the last HTTP `status` on record: 100-599 (0: any)")
	fs.StringVar(&reason, "reason", "", "select by the `reason` on record: "+strings.Join(claim.ReasonWords(), ", ")+" (transient = failed-twice)")
	fs.IntVar(&o.limit, "limit", 0, "look at the first `n` dead letters only: 0 (all) or more")
	fs.BoolVar(&o.all, "all", false, "replay, purge: every dead letter (that the filters select)")
	fs.BoolVar(&o.force, "force", false, "replay: also claims recorded as delivered, and over -max-replays")
	fs.IntVar(&o.maxReplays, "max-replays", defaultMaxReplays, "replay: refuse a dead letter replayed `n` times already: 1-1000")
	fs.BoolVar(&o.yes, "yes", false, "purge: really delete")
	fs.BoolVar(&o.noStore, "no-store", false, "read no store (EAI_MQ_DB): there is none; replay, purge and serve need it to run without one")
	fs.StringVar(&o.addr, "addr", defaultAddr, "serve: listen on `host:port`; not loopback needs EAIMQ_DLQ_TOKEN")
	fs.BoolVar(&o.readOnly, "read-only", false, "serve: no action (retry, purge, edit), not even by a hand-made POST")
	fs.DurationVar(&o.refresh, "refresh", 5*time.Second, "serve: the groups page reloads every `d`: 0 (never) or 1s to 1h")
	pos, err := parseInterleaved(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return cli.Usagef("no command: %s", commandWords)
	}
	cmd := pos[0]
	o.ids = pos[1:]
	if !slices.Contains(commands, cmd) {
		return cli.Usagef("unknown command %q: %s", cmd, commandWords)
	}
	if err := o.check(fs, cmd, reason); err != nil {
		return err
	}
	if cmd == "serve" {
		// Before the store or the broker: an unsafe address is a usage error.
		if err := dlqweb.Check(dlqweb.Config{Addr: o.addr, Token: getenv(dlqweb.EnvToken)}); err != nil {
			return cli.Usagef("%v", err)
		}
	}

	var st store.Store
	if !o.noStore {
		st, err = store.Open(store.Path(getenv), store.Options{ReadOnly: true})
		switch {
		case err != nil && (cmd == "replay" || cmd == "purge" || cmd == "serve"):
			return cli.Exitf(cli.ExitIOErr, "%v\n  %s reads the store to know what it selects and what was delivered; without it every dead letter\n"+
				"  looks unknown. Set EAI_MQ_DB to the consumer's store, or add -no-store if there really is none; nothing was done", err, cmd)
		case err != nil:
			fmt.Fprintf(stderr, "dlq: warning: %v; our reasons show as unknown\n", err)
		default:
			defer st.Close()
		}
	}

	if cmd == "serve" {
		return serve(ctx, getenv, st, &o, stdout, stderr)
	}

	conn, err := dial(ctx, getenv)
	if err != nil {
		return err
	}
	defer broker.Close(conn)
	b, err := newBrowser(conn, st)
	if err != nil {
		return err
	}
	// Whatever happens, closing the connection (or dying) returns every
	// message not acked to claim.dead.

	switch cmd {
	case "list":
		return list(ctx, b, &o, stdout, stderr)
	case "show":
		return show(ctx, b, &o, stdout)
	case "replay":
		return replay(ctx, conn, b, &o, stdout, stderr)
	default:
		return purge(ctx, b, &o, stdout, stderr)
	}
}

// dial connects to the broker of EAI_AMQP_URL.
func dial(ctx context.Context, getenv func(string) string) (*amqp.Connection, error) {
	conn, err := broker.Dialer{Program: "dlq", Timeout: 10 * time.Second, Getenv: getenv}.Dial(ctx, broker.URL(getenv))
	if err != nil {
		return nil, cli.Exit(cli.ExitUnavailable, err)
	}
	return conn, nil
}

// parseInterleaved parses flags wherever they stand among the arguments, as
// people type them (dlq purge X -yes, dlq replay X -force), and returns the
// arguments that are not flags. After "--" every argument is one.
//
// cli.Flags parses the flags in front of the first argument; it defines
// -version, so it runs once. Each later run of flags is parsed here with
// the same rules, so that dlq list -h prints the manual, dlq list -bogus
// its one line and where the manual is, and -version works anywhere.
func parseInterleaved(fs *flag.FlagSet, args []string, stdout io.Writer) ([]string, error) {
	var pos []string
	err := cli.Flags(fs, doc, args, stdout)
	for err == nil {
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		// The flag package stops at the first non-flag, or after "--".
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
		err = cli.Parse(fs, args) // fs.Usage is cli.Flags' silent one
		switch {
		case errors.Is(err, flag.ErrHelp):
			io.WriteString(stdout, cli.Manual(doc))
		case err != nil:
			fmt.Fprintln(fs.Output(), cli.SeeManual(fs.Name()))
		}
	}
	if err != nil {
		return nil, err
	}
	if v := fs.Lookup("version"); v != nil && v.Value.String() == "true" {
		// Given after the command: cli.Flags only saw the flags before it.
		fmt.Fprintln(stdout, cli.Version(fs.Name()))
		return nil, flag.ErrHelp
	}
	return pos, nil
}

// check refuses what cannot be meant: values out of range, an empty ID, a
// flag the command does not use.
func (o *options) check(fs *flag.FlagSet, cmd, reason string) error {
	var stray []string
	fs.Visit(func(f *flag.Flag) {
		if !slices.Contains(usedBy[f.Name], cmd) {
			stray = append(stray, "-"+f.Name)
		}
	})
	if len(stray) > 0 {
		return cli.Usagef("%s does nothing for %s; leave it out", strings.Join(stray, ", "), cmd)
	}
	if reason != "" {
		r, ok := claim.ParseReason(reason)
		if !ok {
			return cli.Usagef("-reason %q: want one of %s (or transient)", reason, strings.Join(claim.ReasonWords(), ", "))
		}
		o.reason, o.byReason = r, true
	}
	if o.status != 0 && (o.status < 100 || o.status > 599) {
		return cli.Usagef("-status %d: want an HTTP status, 100-599 (0: any)", o.status)
	}
	if o.limit < 0 {
		return cli.Usagef("-limit %d: want 0 (all) or more", o.limit)
	}
	if o.maxReplays < 1 || o.maxReplays > maxMaxReplays {
		return cli.Usagef("-max-replays %d: want 1-%d", o.maxReplays, maxMaxReplays)
	}
	if o.noStore && (o.status != 0 || (o.byReason && o.reason != claim.ReasonUnknown)) {
		return cli.Usagef("-status and -reason read the store, and -no-store reads none: only -reason unknown selects anything then")
	}
	if slices.Contains(o.ids, "") {
		return cli.Usagef("an empty ID names no dead letter (a message without a message_id goes by its guid or sha256: key, as list shows)")
	}
	switch cmd {
	case "list":
		if len(o.ids) > 0 {
			return cli.Usagef("list takes no IDs (use show ID)")
		}
	case "serve":
		if len(o.ids) > 0 {
			return cli.Usagef("serve takes no IDs (the page shows every dead letter)")
		}
		if o.refresh != 0 && (o.refresh < time.Second || o.refresh > maxRefresh) {
			return cli.Usagef("-refresh %v: want 0 (never) or 1s to 1h", o.refresh)
		}
	case "show":
		if len(o.ids) != 1 {
			return cli.Usagef("show takes one ID")
		}
	case "replay", "purge":
		if len(o.ids) == 0 && !o.all && !o.filtered() {
			return cli.Usagef("%s needs IDs, -all, or a filter (-status, -reason)", cmd)
		}
		if len(o.ids) > 0 && o.all {
			return cli.Usagef("give IDs or -all, not both")
		}
	}
	return nil
}
