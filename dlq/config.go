package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"eaimq/internal/claim"
	"eaimq/internal/cli"
	"eaimq/internal/dlq"
	"eaimq/internal/dlqweb"
)

// config is one run of dlq: the command, what the engine acts with, and
// the flags that are the program's own.
type config struct {
	cmd     string
	dlq     dlq.Config
	all     bool           // replay, purge: every dead letter (that the filters select)
	noStore bool           // read no store: there is none
	reason  string         // -reason as given; check parses it into dlq.Reason
	queue   bool           // list, show: walk claim.dead even where dead letters were ingested
	ingest  bool           // serve: run dlq ingest in the page's process
	metrics string         // ingest: serve its metrics on this host:port ("": none)
	tokens  []dlqweb.Token // serve: EAIMQ_DLQ_TOKEN and EAIMQ_DLQ_TOKENS
	rateSet bool           // replay, serve: -rate was given (else the queue's replays are not paced)
}

// commands are dlq's commands, as the usage errors name them.
var commands = []string{"list", "show", "replay", "purge", "restore", "edit", "history", "serve", "ingest"}

const commandWords = "list, show, replay, purge, restore, edit, history, serve or ingest"

// Ranges and defaults of the flags.
const (
	maxMaxReplays = 1000
	// maxBatch bounds ingest's -batch: its prefetch is twice that, and
	// the broker holds that many for it.
	maxBatch = 10_000
	// defaultAddr is where serve listens: loopback, so that only this
	// host's users reach the page (any other address needs EAIMQ_DLQ_TOKEN).
	defaultAddr = "127.0.0.1:8088"
	// maxRefresh bounds -refresh: a page that reloads less often than this
	// is not live any more.
	maxRefresh = time.Hour
	// defaultRate paces a replay of ingested rows: a bulk replay of an
	// incident's 200,000 dead letters at full speed floods the consumer
	// and the partner behind it (ServiceControl #225, #501); 500 a second
	// is faster than the lab's partner answers anyway. A replay over
	// claim.dead (the lab's, without ingestion) is not paced unless -rate
	// is given: the lab's default stays as it was.
	defaultRate = 500
)

// flagSet is the FlagSet of command cmd, as go and litestream give each
// command its own. Every command's flags set the fields of the one c, so
// that a flag means the same before the command and after it.
func (c *config) flagSet(cmd string) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	d := &c.dlq
	if cmd != "history" && cmd != "ingest" { // they do not walk claim.dead
		fs.IntVar(&d.Limit, "limit", 0, "look at the first `n` dead letters only: 0 (all) or more")
		fs.IntVar(&d.MaxHeld, "max-held", dlq.DefaultMaxHeld, "a walk holds at most `n` dead letters unacked in the broker: 0 (no bound) or more")
		fs.BoolVar(&c.noStore, "no-store", false, "read no store (EAI_MQ_DB): there is none; replay, purge, edit and serve need it to run without one")
	}
	switch cmd {
	case "list":
		c.jsonFlag(fs)
		c.filterFlags(fs)
		c.archiveFlag(fs)
		c.queueFlag(fs)
	case "show":
		c.jsonFlag(fs)
		c.archiveFlag(fs)
		c.queueFlag(fs)
	case "edit":
		fs.StringVar(&d.Edit.File, "body", "", "take the new body from `file` (- for stdin) instead of an editor")
		c.queueFlag(fs)
	case "history":
		c.jsonFlag(fs)
	case "replay":
		c.filterFlags(fs)
		c.allFlag(fs)
		fs.BoolVar(&d.Force, "force", false, "also claims recorded as delivered, over -max-replays, and ingested ones left replaying by a crash")
		c.maxReplaysFlag(fs)
		fs.Float64Var(&d.Rate, "rate", defaultRate, "replay at most `n` dead letters a second: 0 (no pacing) or more; over claim.dead without ingestion, unpaced unless given")
		c.queueFlag(fs)
	case "purge":
		c.filterFlags(fs)
		c.allFlag(fs)
		fs.BoolVar(&d.Yes, "yes", false, "really purge")
		c.noArchiveFlag(fs)
		c.queueFlag(fs)
	case "restore":
		c.queueFlag(fs)
	case "serve":
		c.noArchiveFlag(fs)
		c.maxReplaysFlag(fs)
		fs.StringVar(&d.Page.Addr, "addr", defaultAddr, "listen on `host:port`; not loopback needs EAIMQ_DLQ_TOKEN")
		fs.BoolVar(&d.Page.ReadOnly, "read-only", false, "no action (retry, purge, edit), not even by a hand-made POST")
		fs.DurationVar(&d.Page.Refresh, "refresh", 5*time.Second, "the groups page reloads every `d`: 0 (never) or 1s to 1h")
		fs.BoolVar(&c.ingest, "ingest", false, "also run dlq ingest in this process")
		c.ingestFlags(fs)
	case "ingest":
		c.ingestFlags(fs)
		fs.BoolVar(&c.dlq.Ingest.ArchiveQueue, "archive-queue", false, "ingest: take claim.dead.archive into the store's archive as purged rows, once, and exit when it is empty")
	}
	return fs
}

// The flags that more than one command takes.

func (c *config) jsonFlag(fs *flag.FlagSet) {
	fs.BoolVar(&c.dlq.JSON, "json", false, "JSON instead of text (list: one object per line)")
}

func (c *config) filterFlags(fs *flag.FlagSet) {
	fs.Var(statusFlag{v: &c.dlq.Status}, "status", "select by the last HTTP `status` on record: 100-599, none (no answer), 0 (any)")
	fs.StringVar(&c.reason, "reason", "", "select by the `reason` on record: "+strings.Join(reasonWords(), ", ")+" (transient = failed-twice)")
	fs.StringVar(&c.dlq.GUID, "guid", "", "select by the body's `guid`")
	fs.StringVar(&c.dlq.Text, "text", "", "select the dead letters whose body holds `text` as whole words, letter case aside")
}

func (c *config) archiveFlag(fs *flag.FlagSet) {
	fs.BoolVar(&c.dlq.Archive, "archive", false, "the purged dead letters of claim.dead.archive instead of claim.dead")
}

func (c *config) noArchiveFlag(fs *flag.FlagSet) {
	fs.BoolVar(&c.dlq.NoArchive, "no-archive", false, "purge: delete for good instead of moving to claim.dead.archive")
}

func (c *config) queueFlag(fs *flag.FlagSet) {
	fs.BoolVar(&c.queue, "queue", false, "act on claim.dead (and claim.dead.archive) even where dead letters were ingested into the store")
}

func (c *config) ingestFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.dlq.Ingest.Batch, "batch", dlq.DefaultIngestBatch, "ingest: write and ack `n` dead letters at a time: 1-10000")
	fs.Int64Var(&c.dlq.Ingest.MaxRows, "max-rows", dlq.DefaultIngestMaxRows, "ingest: stop taking more at `n` dead letters in the store: 1 or more")
	fs.StringVar(&c.metrics, "metrics-addr", "", "ingest: serve Prometheus /metrics on `host:port`")
	fs.DurationVar(&c.dlq.Ingest.Retention, "archive-retention", dlq.DefaultArchiveRetention, "ingest: keep purged and replayed rows for `d`, then prune them: 1h or more")
}

func (c *config) allFlag(fs *flag.FlagSet) {
	fs.BoolVar(&c.all, "all", false, "every dead letter (that the filters select)")
}

func (c *config) maxReplaysFlag(fs *flag.FlagSet) {
	fs.IntVar(&c.dlq.MaxReplays, "max-replays", dlq.DefaultMaxReplays, "refuse a dead letter replayed `n` times already: 1-1000")
}

// parseConfig parses dlq's arguments: flags anywhere, the command, its IDs.
// It opens no store and dials no broker; -h and -version print on stdout,
// the flag package's errors go to stderr.
//
// The flags before the command are read before the command is known, so
// every command's flags are parsed by one FlagSet made of them all; a flag
// the command's own FlagSet does not define is then refused by name (dlq
// -yes list), rather than as a flag that does not exist.
func parseConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) (config, error) {
	var c config
	sets := make(map[string]*flag.FlagSet, len(commands))
	every := flag.NewFlagSet("dlq", flag.ContinueOnError)
	every.SetOutput(stderr)
	for _, cmd := range commands {
		sets[cmd] = c.flagSet(cmd)
		sets[cmd].VisitAll(func(f *flag.Flag) {
			if every.Lookup(f.Name) == nil {
				every.Var(f.Value, f.Name, f.Usage)
			}
		})
	}
	pos, err := parseInterleaved(every, args, stdout)
	if err != nil {
		return c, err
	}
	if len(pos) == 0 {
		return c, cli.Usagef("no command: %s", commandWords)
	}
	c.cmd, c.dlq.IDs = pos[0], pos[1:]
	own, ok := sets[c.cmd]
	if !ok {
		return c, cli.Usagef("unknown command %q: %s", c.cmd, commandWords)
	}
	var stray []string
	every.Visit(func(f *flag.Flag) { // in the order of their names
		if f.Name == "rate" {
			c.rateSet = true
		}
		if own.Lookup(f.Name) == nil {
			stray = append(stray, "-"+f.Name)
		}
	})
	if len(stray) > 0 {
		return c, cli.Usagef("%s does nothing for %s; leave it out", strings.Join(stray, ", "), c.cmd)
	}
	if err := c.check(); err != nil {
		return c, err
	}
	if c.cmd == "serve" {
		// Before the store or the broker: an unsafe address, or a token
		// file that cannot be used, is a usage error.
		tokens, err := dlqweb.Tokens(getenv(dlqweb.EnvToken), getenv(dlqweb.EnvTokens))
		if err == nil {
			c.tokens = tokens
			err = dlqweb.Check(dlqweb.Config{Addr: c.dlq.Page.Addr, Tokens: tokens})
		}
		if err != nil {
			return c, cli.Usagef("%v", err)
		}
	}
	return c, nil
}

// parseInterleaved parses flags wherever they stand among the arguments, as
// people type them (dlq purge X -yes, dlq replay X -force), and returns the
// arguments that are not flags. After "--" every argument is one.
//
// cli.Flags parses the flags in front of the first argument; it defines
// -version, so it runs once. Each later run of flags is parsed here with
// the same rules, so that dlq list -h prints the help (and dlq list -h
// full the manual), dlq list -bogus its one line and where the manual is,
// and -version works anywhere.
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
		err = cli.Parse(fs, doc, args, stdout) // fs.Usage is cli.Flags' silent one
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

// check refuses what cannot be meant: values out of range, an empty ID, IDs
// or their absence where the command wants otherwise.
func (c *config) check() error {
	d := &c.dlq
	if c.reason == dlq.CrashLoopWord {
		d.CrashLoop = true
	} else if c.reason != "" {
		r, ok := claim.ParseReason(c.reason)
		if !ok {
			return cli.Usagef("-reason %q: want one of %s (or transient)", c.reason, strings.Join(reasonWords(), ", "))
		}
		d.Reason, d.ByReason = r, true
	}
	if d.Status > 0 && (d.Status < 100 || d.Status > 599) {
		return cli.Usagef("-status %d: want an HTTP status, 100-599, none or 0 (any)", d.Status)
	}
	if d.Limit < 0 {
		return cli.Usagef("-limit %d: want 0 (all) or more", d.Limit)
	}
	if d.Ingest.Batch < 1 || d.Ingest.Batch > maxBatch {
		return cli.Usagef("-batch %d: want 1-%d", d.Ingest.Batch, maxBatch)
	}
	if d.Ingest.MaxRows < 1 {
		return cli.Usagef("-max-rows %d: want 1 or more", d.Ingest.MaxRows)
	}
	if d.Ingest.Retention < time.Hour {
		return cli.Usagef("-archive-retention %v: want 1h or more", d.Ingest.Retention)
	}
	if d.Rate < 0 {
		return cli.Usagef("-rate %v: want 0 (no pacing) or more", d.Rate)
	}
	if d.MaxHeld < 0 {
		return cli.Usagef("-max-held %d: want 0 (no bound) or more", d.MaxHeld)
	}
	if d.MaxReplays < 1 || d.MaxReplays > maxMaxReplays {
		return cli.Usagef("-max-replays %d: want 1-%d", d.MaxReplays, maxMaxReplays)
	}
	if c.noStore && (d.Status != 0 || (d.ByReason && d.Reason != claim.ReasonUnknown)) {
		// -reason crash-loop reads the message, not the store: it stays.
		return cli.Usagef("-status and -reason read the store, and -no-store reads none: only -reason unknown selects anything then")
	}
	if slices.Contains(d.IDs, "") {
		return cli.Usagef("an empty ID names no dead letter (a message without a message_id goes by its guid or sha256: key, as list shows)")
	}
	switch c.cmd {
	case "list":
		if len(d.IDs) > 0 {
			return cli.Usagef("list takes no IDs (use show ID)")
		}
	case "serve":
		if len(d.IDs) > 0 {
			return cli.Usagef("serve takes no IDs (the page shows every dead letter)")
		}
		if d.Page.Refresh != 0 && (d.Page.Refresh < time.Second || d.Page.Refresh > maxRefresh) {
			return cli.Usagef("-refresh %v: want 0 (never) or 1s to 1h", d.Page.Refresh)
		}
	case "ingest":
		if len(d.IDs) > 0 {
			return cli.Usagef("ingest takes no IDs (it takes every dead letter of claim.dead)")
		}
	case "restore":
		if len(d.IDs) == 0 {
			return cli.Usagef("restore needs IDs (dlq -archive list shows the purged dead letters)")
		}
	case "show", "edit":
		if len(d.IDs) != 1 {
			return cli.Usagef("%s takes one ID", c.cmd)
		}
	case "history":
		if len(d.IDs) > 1 {
			return cli.Usagef("history takes one ID, or none for every entry")
		}
	case "replay", "purge":
		if len(d.IDs) == 0 && !c.all && d.Status == 0 && !d.ByReason && !d.CrashLoop && d.GUID == "" && d.Text == "" {
			return cli.Usagef("%s needs IDs, -all, or a filter (-status, -reason, -guid, -text)", c.cmd)
		}
		if len(d.IDs) > 0 && c.all {
			return cli.Usagef("give IDs or -all, not both")
		}
	}
	return nil
}

// reasonWords are -reason's words: the store's, and crash-loop.
func reasonWords() []string { return append(claim.ReasonWords(), dlq.CrashLoopWord) }

// statusFlag is -status as a flag.Value: an HTTP status, none
// (dlq.StatusNone), or 0 (any); the range is check's. The program's, not
// the engine's: the engine knows nothing of flags.
type statusFlag struct{ v *int }

func (s statusFlag) String() string {
	switch {
	case s.v == nil:
		return "0"
	case *s.v == dlq.StatusNone:
		return "none"
	}
	return strconv.Itoa(*s.v)
}

func (s statusFlag) Set(v string) error {
	if v == "none" {
		*s.v = dlq.StatusNone
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return errors.New("parse error")
	}
	*s.v = n
	return nil
}
