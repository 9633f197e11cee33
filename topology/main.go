package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/redact"
	"eaimq/internal/retry"
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
	cli.Report(os.Stderr, "topology", err)
	os.Exit(cli.Code(err))
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("topology", flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := fs.Bool("check", false, "verify the topology and change nothing")
	timeout := fs.Duration("timeout", 10*time.Second, "connection `timeout`")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	queueType := fs.String("queue-type", string(topo.Classic), "`type` of claim.in and claim.dead: classic or quorum")
	migrate := fs.String("migrate", "", "move claim.in and claim.dead, claims and all, to queue `type` classic or quorum")
	retryDelays := fs.String("retry-delays", "", "also declare the consumer's delay queues for `delays` such as 1s,10s,1m (consumer --retry-delays)")
	if err := cli.Flags(fs, doc, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	kind, err := topo.ParseQueueType(*queueType)
	if err != nil {
		return cli.Usagef("-queue-type: %v", err)
	}
	var plan retry.Plan
	if *retryDelays != "" {
		if plan, err = retry.Parse(*retryDelays); err != nil {
			return cli.Exit(cli.ExitUsage, err)
		}
	}
	var migrateTo topo.QueueType
	if *migrate != "" {
		if migrateTo, err = topo.ParseQueueType(*migrate); err != nil {
			return cli.Usagef("-migrate: %v", err)
		}
		if *check || *asJSON || *retryDelays != "" {
			return cli.Usagef("-migrate cannot be combined with -check, -json or -retry-delays")
		}
		if flagSet(fs, "queue-type") && kind != migrateTo {
			return cli.Usagef("-queue-type %s contradicts -migrate %s", kind, migrateTo)
		}
	}
	raw := broker.URL(getenv)
	vhost, err := broker.VHost(raw)
	if err != nil {
		return err // exit 2: the URL is an argument
	}
	// The dial's error carries its own exit code (69, 77, 78, 130).
	conn, err := broker.Dialer{Program: "topology", Timeout: *timeout, Getenv: getenv}.Dial(ctx, raw)
	if err != nil {
		return err
	}
	defer broker.Close(conn)

	if migrateTo != "" {
		return runMigrate(ctx, conn, vhost, migrateTo, stdout)
	}
	if *check {
		return runCheck(ctx, conn, raw, vhost, kind, plan, stdout, *asJSON)
	}
	if err := topo.DeclareFor(conn, kind); err != nil {
		return explain(conn, err, vhost, kind)
	}
	// The delay queues last: they dead-letter into eai.claim, which now
	// exists, so a claim that expires in one always has its way back.
	if err := declareRetryQueues(conn, kind, plan); err != nil {
		return explain(conn, err, vhost, kind)
	}
	if *asJSON {
		writeJSON(stdout, declared{VHost: vhost, Declared: counts{
			Exchanges: len(topo.Exchanges), Queues: len(topo.QueuesFor(kind)), Bindings: len(topo.Bindings),
			DelayQueues: len(plan.Queues())}})
		return nil
	}
	queues := fmt.Sprintf("%d queues", len(topo.QueuesFor(kind)))
	if kind != topo.Classic {
		// The default's line stays the lab's; another type says so.
		queues = fmt.Sprintf("%d %s queues", len(topo.QueuesFor(kind)), kind)
	}
	fmt.Fprintf(stdout, "topology: declared %d exchanges, %s, %d bindings in vhost %q (%s)\n",
		len(topo.Exchanges), queues, len(topo.Bindings), vhost, redact.URL(raw))
	if len(plan.Delays) > 0 {
		// A line of its own: the lab's line above stays as it was.
		fmt.Fprintf(stdout, "topology: declared %d delay queue(s) for consumer --retry-delays %s: %s\n",
			len(plan.Queues()), plan, strings.Join(retryQueueNames(plan), ", "))
	}
	return nil
}

// declareRetryQueues declares the delay queues of plan, of type kind.
func declareRetryQueues(conn *amqp.Connection, kind topo.QueueType, plan retry.Plan) error {
	if len(plan.Delays) == 0 {
		return nil
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	for _, d := range plan.Queues() {
		s := topo.RetryQueue(kind, retry.QueueName(d), d)
		if err := topo.DeclareQueue(ch, s); err != nil {
			return &topo.DeclareError{Kind: "queue", Name: s.Name, Object: s.String(), Err: err}
		}
	}
	return nil
}

func retryQueueNames(plan retry.Plan) []string {
	var out []string
	for _, d := range plan.Queues() {
		out = append(out, retry.QueueName(d))
	}
	return out
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// explain turns a failed declaration into a message that says what differs,
// what the contract wants, and what to do.
func explain(conn *amqp.Connection, err error, vhost string, kind topo.QueueType) error {
	var de *topo.DeclareError
	if !errors.As(err, &de) {
		return cli.Exit(cli.ExitUnavailable, err)
	}
	switch broker.Code(err) {
	case 406:
		// A queue of the other type is not a mistake to delete: it is the
		// same queue, claims and all, and -migrate moves them.
		if de.Kind == "queue" {
			if st, ierr := topo.InspectQueue(conn, de.Name); ierr == nil && st.Type == kind.Other() {
				return cli.Exitf(cli.ExitConfig, "%s", typePlan(de.Name, vhost, st, kind))
			}
		}
		return cli.Exitf(cli.ExitConfig, "%s %s already exists in vhost %q with other properties: %s\n"+
			"  wanted: %s\n"+
			"  remedy: an existing %s cannot be changed in place. If it is empty, delete it\n"+
			"          (rabbitmqctl -p %s delete_%s %s) and run topology again; if it holds\n"+
			"          claims, move them out first (a shovel): deleting a queue deletes its messages",
			de.Kind, de.Name, vhost, broker.Reason(err), de.Object, de.Kind, vhost, de.Kind, de.Name)
	case 403:
		return cli.Exitf(cli.ExitConfig, "%s: access refused in vhost %q: %s (the user needs configure permission)", de.Object, vhost, broker.Reason(err))
	}
	return cli.Exit(cli.ExitUnavailable, err)
}

// declared is -json's result of a declaration.
type declared struct {
	VHost    string `json:"vhost"`
	Declared counts `json:"declared"`
}

type counts struct {
	Exchanges int `json:"exchanges"`
	Queues    int `json:"queues"`
	Bindings  int `json:"bindings"`
	// DelayQueues: with -retry-delays only.
	DelayQueues int `json:"delay_queues,omitempty"`
}

// writeJSON prints v as one line of JSON, "->" as it is.
func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v) // strings, numbers and booleans: only the write can fail, as with text
}
