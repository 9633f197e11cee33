// Dlq shows why claims were dead-lettered, and replays or purges them
// without losing one.
//
// Usage:
//
//	dlq [-json] [-status N] [-reason R] [-limit N] list
//	dlq show ID
//	dlq [-status N] [-reason R] [-force] replay (ID... | -all)
//	dlq [-status N] [-reason R] -yes purge (ID... | -all)
//
// Flags come before the command; IDs are message_ids (or, for a message that
// had none, the body's guid or the sha256: key the consumer filed it under).
//
// list prints every message of claim.dead as a table, and consumes nothing:
// message_id, claimId, when and from which queue it was dead-lettered and
// the broker's reason and count (x-death), and our reason: the last HTTP
// status or error and the number of partner calls, from the consumer's
// attempt log in EAI_MQ_DB ("unknown" when the store has no record).
// -json prints one object per line instead.
//
// show prints one message in full: properties, headers, the attempt history
// from the store, and the body.
//
// replay puts the selected claims back on eai.claim/claim for another try,
// after the partner or the claim was fixed: a copy with the same body,
// message_id and content type, persistent, with publisher confirms and
// mandatory, without the broker's x-death headers and with an
// x-eaimq-replays count. The dead copy is acked only after the broker
// confirmed the new one: dying in between leaves a duplicate, which the
// consumer's dedup absorbs, never a loss. A claim the store records as
// delivered is skipped and reported, unless -force.
//
// purge deletes the selected dead letters; it needs -yes (without it, it
// prints what it would delete) and prints what it deleted.
//
// Selection: IDs, or -all, or the filters -status N (the last HTTP status)
// and -reason rejected|transient|no-id|delivered|unknown. Filters narrow IDs
// and -all too; list and purge take them alone.
//
// Environment:
//
//	EAI_AMQP_URL  broker address (default amqp://guest:guest@127.0.0.1:5672/%2F)
//	EAI_MQ_DB     the consumer's store (default /root/eaimw/mq/processed.db)
//
// Exit status:
//
//	0   done (for replay: every selected claim replayed or skipped as delivered)
//	1   a replay was refused by the broker (nack or return), and that dead
//	    letter stays in claim.dead; or show found no dead letter with the ID
//	2   usage error, or purge without -yes
//	69  the broker cannot be reached
//	74  the store cannot be read (replay needs it, unless -force)
//	78  claim.dead or eai.claim does not exist: run topology first
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
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

type options struct {
	json   bool
	status int
	reason string
	limit  int
	all    bool
	force  bool
	yes    bool
	ids    []string
}

// selects says whether m is selected by IDs, -all and the filters.
func (o *options) selects(m *dead) bool {
	if len(o.ids) > 0 && !slices.Contains(o.ids, m.Key) && !slices.Contains(o.ids, m.d.MessageId) {
		return false
	}
	if o.status != 0 && (!m.Known || m.Rec.LastStatus != o.status) {
		return false
	}
	if o.reason != "" && m.kind() != o.reason {
		return false
	}
	return true
}

func (o *options) filtered() bool { return o.status != 0 || o.reason != "" }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dlq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.BoolVar(&o.json, "json", false, "list: one JSON object per line")
	fs.IntVar(&o.status, "status", 0, "select by the last HTTP `status` (422, 503, ...)")
	fs.StringVar(&o.reason, "reason", "", "select by `reason`: rejected, transient, no-id, delivered, unknown")
	fs.IntVar(&o.limit, "limit", 0, "look at the first `n` dead letters only (0: all)")
	fs.BoolVar(&o.all, "all", false, "replay/purge: every dead letter (that the filters select)")
	fs.BoolVar(&o.force, "force", false, "replay: also claims the store records as delivered")
	fs.BoolVar(&o.yes, "yes", false, "purge: really delete")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: dlq [flags] list | show ID | replay (ID...|-all) | purge -yes (ID...|-all)\n\n"+
			"Shows why claims in claim.dead were dead-lettered, and replays or purges them.\n"+
			"list and show consume nothing. Flags go before the command.\n\nflags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nenvironment: EAI_AMQP_URL, EAI_MQ_DB\n"+
			"exit status: 0 ok, 1 a replay refused or no such ID, 2 usage (or purge without -yes), 69 broker unreachable,\n"+
			"             74 store unreadable, 78 topology missing\n")
	}
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return cli.Usagef("no command: list, show, replay or purge")
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	// Let flags follow the command too (dlq replay -all), as people type it.
	if err := cli.Parse(fs, rest); err != nil {
		return err
	}
	o.ids = fs.Args()
	switch o.reason {
	case "", "rejected", "transient", "no-id", "delivered", "unknown":
	default:
		return cli.Usagef("-reason must be rejected, transient, no-id, delivered or unknown")
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
	default:
		fs.Usage()
		return cli.Usagef("unknown command %q: list, show, replay or purge", cmd)
	}

	dbPath := store.Path(getenv)
	st, storeErr := store.Open(dbPath, store.Options{ReadOnly: true})
	if storeErr != nil {
		if cmd == "replay" && !o.force {
			return cli.Exitf(cli.ExitIOErr, "%v\n  replay checks the store so that a delivered claim is not sent again; set EAI_MQ_DB, or add -force", storeErr)
		}
		fmt.Fprintf(stderr, "dlq: warning: %v; our reasons show as unknown\n", storeErr)
		st = nil
	} else {
		defer st.Close()
	}

	conn, err := broker.Dial(broker.URL(getenv), "dlq", 10*time.Second)
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
		return list(ctx, b, &o, stdout)
	case "show":
		return show(ctx, b, &o, stdout)
	case "replay":
		return replay(ctx, conn, b, &o, stdout, stderr)
	default:
		return purge(ctx, b, &o, stdout)
	}
}

// row is the JSON form of one dead letter.
type row struct {
	MessageID string    `json:"message_id"`
	ClaimID   string    `json:"claim_id,omitempty"`
	DeadAt    time.Time `json:"dead_lettered_at,omitzero"`
	FromQueue string    `json:"from_queue,omitempty"`
	Broker    string    `json:"broker_reason,omitempty"`
	Count     int64     `json:"broker_count"`
	Kind      string    `json:"reason"`
	Status    int       `json:"status,omitempty"`
	Excerpt   string    `json:"excerpt,omitempty"`
	Attempts  int       `json:"attempts"`
	OurReason string    `json:"our_reason"`
	Replays   int64     `json:"replays,omitempty"`
}

func toRow(m *dead) row {
	r := row{MessageID: m.Key, ClaimID: m.ClaimID, DeadAt: m.DeadAt, FromQueue: m.FromQueue, Broker: m.Broker,
		Count: m.Count, Kind: m.kind(), OurReason: m.ourReason(), Replays: m.Replays}
	if m.Known {
		r.Status, r.Excerpt, r.Attempts = m.Rec.LastStatus, m.Rec.LastError, m.Rec.Attempts
	}
	return r
}

func list(ctx context.Context, b *browser, o *options, w io.Writer) error {
	n := 0
	enc := newEncoder(w)
	if !o.json {
		fmt.Fprintf(w, "%-38s %-14s %-19s %-9s %-14s %-8s %s\n", "MESSAGE_ID", "CLAIM_ID", "DEAD-LETTERED (UTC)", "FROM", "BROKER", "ATTEMPTS", "OUR REASON")
	}
	err := b.walk(ctx, o.limit, func(m *dead) (bool, error) {
		if !o.selects(m) {
			return true, nil
		}
		n++
		r := toRow(m)
		if o.json {
			return true, enc.Encode(r)
		}
		when := "-"
		if !r.DeadAt.IsZero() {
			when = r.DeadAt.UTC().Format("2006-01-02 15:04:05")
		}
		attempts := "-"
		if m.Known {
			attempts = strconv.Itoa(r.Attempts)
		}
		fmt.Fprintf(w, "%-38s %-14s %-19s %-9s %-14s %-8s %s\n", clip(r.MessageID, 38), clip(r.ClaimID, 14), when,
			clip(r.FromQueue, 9), clip(fmt.Sprintf("%s x%d", r.Broker, r.Count), 14), attempts, r.OurReason)
		return true, nil
	})
	if err != nil {
		return err
	}
	if !o.json {
		fmt.Fprintf(w, "%d dead letter(s) listed; claim.dead keeps them all\n", n)
	}
	return nil
}

func show(ctx context.Context, b *browser, o *options, w io.Writer) error {
	var found *dead
	err := b.walk(ctx, o.limit, func(m *dead) (bool, error) {
		if o.selects(m) {
			found = m
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	if found == nil {
		return cli.Exitf(cli.ExitFailure, "no dead letter with id %q in claim.dead", o.ids[0])
	}
	m, d := found, found.d
	fmt.Fprintf(w, "message_id:    %s\n", d.MessageId)
	if m.Key != d.MessageId {
		fmt.Fprintf(w, "store key:     %s\n", m.Key)
	}
	fmt.Fprintf(w, "claim_id:      %s\ncontent_type:  %s\ndelivery_mode: %d\ntimestamp:     %s\napp_id:        %s\n",
		m.ClaimID, d.ContentType, d.DeliveryMode, d.Timestamp.UTC().Format(time.RFC3339), d.AppId)
	fmt.Fprintf(w, "headers:\n")
	keys := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %s: %v\n", k, d.Headers[k])
	}
	fmt.Fprintf(w, "our reason:    %s\n", m.ourReason())
	if b.store != nil {
		as, err := b.store.Attempts(ctx, m.Key)
		if err != nil {
			return cli.Exit(cli.ExitIOErr, err)
		}
		fmt.Fprintf(w, "attempts (failures and decisions; a success is the record's last status):\n")
		if len(as) == 0 {
			fmt.Fprintf(w, "  none on record\n")
		}
		for _, a := range as {
			fmt.Fprintf(w, "  %s  redelivered=%-5v status=%-3d action=%-7s %s %s\n", a.At.UTC().Format(time.RFC3339),
				a.Redelivered, a.Status, a.Action, a.Latency, a.Error)
		}
	}
	fmt.Fprintf(w, "body (%d bytes):\n%s\n", len(d.Body), d.Body)
	return nil
}

func purge(ctx context.Context, b *browser, o *options, w io.Writer) error {
	var ids []string
	err := b.walk(ctx, o.limit, func(m *dead) (bool, error) {
		if !o.selects(m) {
			return true, nil
		}
		if o.yes {
			// Acking a dead letter is deleting it.
			if err := m.d.Ack(false); err != nil {
				return false, cli.Exit(cli.ExitUnavailable, fmt.Errorf("ack %s: %w", m.Key, err))
			}
			fmt.Fprintf(w, "deleted %s\n", m.Key)
		} else {
			fmt.Fprintf(w, "would delete %s\n", m.Key)
		}
		ids = append(ids, m.Key)
		return true, nil
	})
	if err != nil {
		return err
	}
	if !o.yes {
		return cli.Usagef("purge would delete %d dead letter(s); add -yes to delete them", len(ids))
	}
	fmt.Fprintf(w, "purged %d dead letter(s)\n", len(ids))
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
