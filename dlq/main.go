// Dlq shows why claims were dead-lettered, and replays or purges them
// without losing one.
//
// Usage:
//
//	dlq [-json] [-status N] [-reason R] [-limit N] list
//	dlq [-json] show ID
//	dlq [-status N] [-reason R] [-force] [-max-replays N] replay (ID... | -all)
//	dlq [-status N] [-reason R] -yes purge (ID... | -all)
//
// Flags may stand anywhere: before the command, after it, among the IDs
// (dlq purge X -yes). After "--" every argument is an ID, even one that
// starts with "-". IDs are message_ids (or, for a message that had none,
// the body's guid or the sha256: key the consumer filed it under, as list
// shows them); an empty ID is a usage error, never "every message without
// a message_id".
//
// list prints every message of claim.dead as a table, and consumes nothing:
// message_id, claimId, when and from which queue it was dead-lettered and
// the broker's reason and count (x-death), the number of partner calls, and
// our reason as the consumer recorded it in EAI_MQ_DB: the reason's word
// (the -reason words below) and its sentence ("unexpected 200: not a
// creation"). -json prints one object per line instead, with the fields
// message_id, claim_id, dead_lettered_at, from_queue, broker_reason,
// broker_count, reason, dead_reason (the recorded sentence), recorded
// (whether the store has a record), state, status, excerpt, attempts,
// our_reason (status or error and sentence, for people) and replays. When
// -limit leaves dead letters unlooked-at, list says how many (on stderr
// with -json).
//
// show prints one message: properties, headers (x-death included, one
// field a line), the attempt history from the store, and the body. -json
// prints it as one JSON object instead (a body that is not UTF-8 as
// body_base64).
//
// Everything printed as text that comes from a message (ids, claimId,
// headers, body, the partner's answer) is made safe for a terminal: control
// characters (ESC, BEL, CR, ..., DEL, C1), the bidirectional-text controls
// and bytes that are not UTF-8 are printed as escapes (\x1b, \u202e), so a
// crafted claim cannot clear the screen or hide what it says. show keeps the
// body's newlines and tabs. Long fields are clipped with their size
// (table columns to their width, show's fields to 256 characters, show's
// body to 64 KiB); -json prints everything, escaped by JSON.
//
// replay puts the selected claims back on eai.claim/claim for another try,
// after the partner or the claim was fixed: a copy with the same body,
// message_id and content type, persistent, with publisher confirms and
// mandatory, without the broker's x-death headers and with its
// x-eaimq-replays count raised by one. The dead copy is acked only after
// the broker confirmed the new one: dying in between leaves a duplicate,
// which the consumer's dedup absorbs, never a loss. A claim the store
// records as delivered is skipped and reported, unless -force. A dead
// letter already replayed -max-replays times is refused (it stays in
// claim.dead, is reported, and the exit status is 1), unless -force: a
// claim that keeps coming back needs a fix, not another try.
//
// One invocation replays each dead letter at most once, even while a
// consumer runs and sends replayed claims the partner rejects again back to
// claim.dead: every command looks only at the messages claim.dead held when
// it started (counted with a passive declare; they are in front of anything
// dead-lettered later), and replay never sends the same message_id twice in
// one run (a second copy is reported and left in claim.dead).
//
// purge deletes the selected dead letters; it needs -yes (without it, it
// prints what it would delete and exits 2) and prints what it deleted.
//
// Selection: IDs, or -all, or the filters -status N (the last HTTP status
// on record) and -reason R (the reason on record). Filters narrow IDs and
// -all too; list and purge take them alone. The reasons are the store's
// words: delivered, duplicate, retry, rejected, failed-twice (also spelled
// transient), no-id, unexpected-status, unsendable, and unknown for a dead
// letter the store has no record of (or no reason for).
//
// The store: replay and purge refuse to run (exit 74) when EAI_MQ_DB cannot
// be opened or read, since without it every dead letter looks "unknown" and
// -reason unknown would select them all; -no-store says there really is
// none (then nothing can be selected by -status or a -reason other than
// unknown, and replay cannot skip delivered claims). list and show go on
// without it, with a warning. A failed lookup in an open store ends every
// command with exit 74, and nothing more is done.
//
// Flags:
//
//	-json            list, show: JSON instead of text
//	-status N        select by the last HTTP status on record: 100-599 (0: any)
//	-reason R        select by the reason on record (words above)
//	-limit N         look at the first N dead letters only: 0 (all, the default) or more
//	-all             replay, purge: every dead letter the filters select
//	-force           replay: also claims recorded as delivered, and over -max-replays
//	-max-replays N   replay: refuse a dead letter replayed N times already: 1-1000 (default 5)
//	-yes             purge: really delete
//	-no-store        read no store: there is none (replay and purge need this to run without one)
//
// A flag that does nothing for the command (dlq -yes list) is a usage error.
//
// Environment:
//
//	EAI_AMQP_URL  broker address (default amqp://guest:guest@127.0.0.1:5672/%2F)
//	EAI_MQ_DB     the consumer's store (default /root/eaimw/mq/processed.db)
//
// Exit status:
//
//	0    done (for replay: every selected claim replayed, or skipped as
//	     delivered or as replayed already in this run)
//	1    a named ID is not in claim.dead (show, replay, purge -yes); or a
//	     replay was refused, by -max-replays or by the broker (nack or
//	     return), and that dead letter stays in claim.dead
//	2    usage error, or purge without -yes
//	69   the broker cannot be reached
//	74   the store cannot be opened or read (replay and purge; any command
//	     when a lookup fails)
//	75   replay: no confirm in time; the dead letters of that batch stay
//	78   claim.dead or eai.claim does not exist: run topology first
//	130  interrupted; every dead letter not yet acted on stays in claim.dead
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/store"
)

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
	reason     store.Reason
	byReason   bool
	limit      int
	all        bool
	force      bool
	maxReplays int
	yes        bool
	noStore    bool
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
	"limit":       {"list", "show", "replay", "purge"},
	"all":         {"replay", "purge"},
	"force":       {"replay"},
	"max-replays": {"replay"},
	"yes":         {"purge"},
	"no-store":    {"list", "show", "replay", "purge"},
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dlq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := options{found: map[string]bool{}}
	var reason string
	fs.BoolVar(&o.json, "json", false, "list, show: JSON instead of text (list: one object per line)")
	fs.IntVar(&o.status, "status", 0, "select by the last HTTP `status` on record: 100-599 (0: any)")
	fs.StringVar(&reason, "reason", "", "select by the `reason` on record: "+strings.Join(store.ReasonWords(), ", ")+" (transient = failed-twice)")
	fs.IntVar(&o.limit, "limit", 0, "look at the first `n` dead letters only: 0 (all) or more")
	fs.BoolVar(&o.all, "all", false, "replay, purge: every dead letter (that the filters select)")
	fs.BoolVar(&o.force, "force", false, "replay: also claims recorded as delivered, and over -max-replays")
	fs.IntVar(&o.maxReplays, "max-replays", defaultMaxReplays, "replay: refuse a dead letter replayed `n` times already: 1-1000")
	fs.BoolVar(&o.yes, "yes", false, "purge: really delete")
	fs.BoolVar(&o.noStore, "no-store", false, "read no store (EAI_MQ_DB): there is none; replay and purge need it to run without one")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: dlq [flags] list | show ID | replay (ID...|-all) | purge -yes (ID...|-all)\n\n"+
			"Shows why claims in claim.dead were dead-lettered (the reason the consumer recorded in EAI_MQ_DB),\n"+
			"and replays or purges them. list and show consume nothing. Flags may stand anywhere; after --\n"+
			"every argument is an ID. One run looks only at what claim.dead held when it started, and replays\n"+
			"each message_id at most once. Text output escapes control characters and clips long fields.\n\nflags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nenvironment: EAI_AMQP_URL, EAI_MQ_DB\n"+
			"replay and purge refuse to run without the store (74) unless -no-store; list and show warn.\n"+
			"exit status: 0 ok, 1 no such ID or a replay refused (-max-replays, broker), 2 usage (or purge without -yes),\n"+
			"             69 broker unreachable, 74 store unreadable, 75 no confirm in time, 78 topology missing,\n"+
			"             130 interrupted\n")
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return cli.Usagef("no command: list, show, replay or purge")
	}
	cmd := pos[0]
	o.ids = pos[1:]
	if !slices.Contains([]string{"list", "show", "replay", "purge"}, cmd) {
		fs.Usage()
		return cli.Usagef("unknown command %q: list, show, replay or purge", cmd)
	}
	if err := o.check(fs, cmd, reason); err != nil {
		return err
	}

	var st *store.Store
	if !o.noStore {
		st, err = store.Open(store.Path(getenv), store.Options{ReadOnly: true})
		switch {
		case err != nil && (cmd == "replay" || cmd == "purge"):
			return cli.Exitf(cli.ExitIOErr, "%v\n  %s reads the store to know what it selects and what was delivered; without it every dead letter\n"+
				"  looks unknown. Set EAI_MQ_DB to the consumer's store, or add -no-store if there really is none; nothing was done", err, cmd)
		case err != nil:
			fmt.Fprintf(stderr, "dlq: warning: %v; our reasons show as unknown\n", err)
		default:
			defer st.Close()
		}
	}

	conn, err := broker.DialContext(ctx, broker.URL(getenv), "dlq", 10*time.Second)
	if err != nil {
		return cli.Exit(cli.ExitUnavailable, err)
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

// parseInterleaved parses flags wherever they stand among the arguments, as
// people type them (dlq purge X -yes, dlq replay X -force), and returns the
// arguments that are not flags. After "--" every argument is one.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := cli.Parse(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// The flag package stops at the first non-flag, or after "--".
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
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
		r, ok := store.ParseReason(reason)
		if !ok {
			return cli.Usagef("-reason %q: want one of %s (or transient)", reason, strings.Join(store.ReasonWords(), ", "))
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
	if o.noStore && (o.status != 0 || (o.byReason && o.reason != store.ReasonUnknown)) {
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
