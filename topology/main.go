package main

import (
	"context"
	_ "embed"
	"encoding/json"
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
	"eaimq/internal/fail"
	"eaimq/internal/rabbitctl"
	"eaimq/internal/redact"
	"eaimq/internal/retry"
	"eaimq/internal/topo"
	"eaimq/internal/topo/check"
	"eaimq/internal/topo/migrate"
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
	cfg, err := parseConfig(args, getenv, stdout, stderr)
	if err != nil {
		return err
	}
	// The dial's error carries its own class (69, 77, 78, 130).
	dialer := broker.Dialer{Program: "topology", Timeout: cfg.timeout, Getenv: getenv}
	conn, err := dialer.Dial(ctx, cfg.url)
	if err != nil {
		return err
	}
	defer broker.Close(conn)

	switch {
	case cfg.migrate != "":
		return migrate.Run(ctx, conn, migrate.Config{VHost: cfg.vhost, To: cfg.migrate}, stdout)
	case cfg.check:
		cc := check.Config{URL: cfg.url, VHost: cfg.vhost, Kind: cfg.kind, Plan: cfg.plan, JSON: cfg.json, Strict: cfg.strict, Archive: cfg.archive}
		if ctl, ok := rabbitctl.FromEnv(getenv); ok {
			cc.Ctl = &ctl
		}
		return check.Run(ctx, conn, cc, stdout)
	}
	// The handshake is bounded by the dial; the declares that follow are
	// not by the library, and a node that took the connection and then
	// stalls (paused, or cut off from its cluster, while its heartbeats
	// keep the connection alive) would hold topology forever. Past
	// -timeout the socket is closed under them, which fails the pending
	// call. Every declare is idempotent: running topology again finishes
	// what a stopped run began. (Not -migrate, which moves messages for as
	// long as it takes, nor -check, which also waits for rabbitmqctl.)
	stall := time.AfterFunc(dialer.Wait(), func() { broker.Abort(conn, 0) })
	err = declare(conn, cfg, stdout, stderr)
	if !stall.Stop() {
		return fail.Errorf(fail.Unavailable, "the broker took the connection but did not answer the declares within %s (-timeout): a node paused or cut off from its cluster does this; run topology again once it answers (each declare is idempotent)", dialer.Wait())
	}
	return err
}

// declare declares the contract with queues of cfg.kind, then cfg.plan's
// delay queues, and says so.
func declare(conn *amqp.Connection, cfg config, stdout, stderr io.Writer) error {
	kind, plan := cfg.kind, cfg.plan
	kept, err := topo.DeclareKept(conn, kind)
	if err != nil {
		return topo.Explain(conn, err, cfg.vhost, kind)
	}
	for _, q := range kept {
		// Not an error: the queue works as it did. But on RabbitMQ 4 it
		// has the broker's default limit, and claim.dead then drops.
		fmt.Fprintf(stderr, "topology: warning: %s\n", keptWarning(q, cfg.vhost))
	}
	// The archive after the contract: it is dlq's, and the lab's objects
	// stay declared first, as they always were.
	if cfg.archive > 0 {
		other, err := topo.DeclareArchive(conn, kind, cfg.archive)
		if err != nil {
			return topo.Explain(conn, err, cfg.vhost, kind)
		}
		if other != "" {
			// It works as it is: -migrate leaves the archive alone.
			fmt.Fprintf(stderr, "topology: warning: %s in vhost %q is a %s queue, not %s: kept as it is (it works either way; -migrate does not move it)\n",
				topo.ArchiveQueue, cfg.vhost, other, kind)
		}
	}
	// The delay queues last: they dead-letter into eai.claim, which now
	// exists, so a claim that expires in one always has its way back.
	if err := declareRetryQueues(conn, kind, plan); err != nil {
		return topo.Explain(conn, err, cfg.vhost, kind)
	}
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		enc.Encode(declared{VHost: cfg.vhost, Declared: counts{ // numbers: only the write can fail, as with text
			Exchanges: len(topo.Exchanges), Queues: len(topo.QueuesFor(kind)), Bindings: len(topo.Bindings),
			DelayQueues: len(plan.Queues())}, KeptWithoutLimit: kept, Archive: archiveOf(cfg)})
		return nil
	}
	queues := fmt.Sprintf("%d queues", len(topo.QueuesFor(kind)))
	if kind != topo.Classic {
		// The default's line stays the lab's; another type says so.
		queues = fmt.Sprintf("%d %s queues", len(topo.QueuesFor(kind)), kind)
	}
	fmt.Fprintf(stdout, "topology: declared %d exchanges, %s, %d bindings in vhost %q (%s)\n",
		len(topo.Exchanges), queues, len(topo.Bindings), cfg.vhost, redact.URL(cfg.url))
	if cfg.archive > 0 {
		// A line of its own, so that the lab's line above stays as it was.
		fmt.Fprintf(stdout, "topology: declared the archive queue %s: dlq purge keeps a claim there for %s (dlq restore brings it back)\n",
			topo.ArchiveQueue, retention(cfg.archive))
	}
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

// declared is -json's result of a declaration.
type declared struct {
	VHost    string `json:"vhost"`
	Declared counts `json:"declared"`
	// KeptWithoutLimit: the quorum queues kept as an older eaimq declared
	// them, without x-delivery-limit (topo.DeclareKept).
	KeptWithoutLimit []string `json:"kept_without_delivery_limit,omitempty"`
	// Archive is claim.dead.archive, unless -archive-retention 0.
	Archive *archived `json:"archive,omitempty"`
}

type archived struct {
	Queue       string `json:"queue"`
	RetentionMS int64  `json:"retention_ms"`
}

func archiveOf(cfg config) *archived {
	if cfg.archive == 0 {
		return nil
	}
	return &archived{Queue: topo.ArchiveQueue, RetentionMS: cfg.archive.Milliseconds()}
}

// retention says d in days when it is whole days (336h is "14 days").
func retention(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}

// keptWarning is what topology says of a quorum queue it kept without its
// delivery limit, and how to give it one.
func keptWarning(queue, vhost string) string {
	limit, effect := topo.DeliveryLimit, "dead-letters a claim returned 20 times to claim.dead"
	if queue == topo.DeadQueue {
		limit, effect = topo.DeadDeliveryLimit, "drops a dead letter returned 20 times (dlq returns each one it reads)"
	}
	return fmt.Sprintf("quorum queue %s in vhost %q was declared without %s=%d, and a queue's arguments cannot change in place: "+
		"kept as it is. RabbitMQ 3.x sets no limit; 4.x %s. Give it the limit with topology -migrate quorum "+
		"(consumers stopped), or a policy with \"delivery-limit\":%d (docs/upgrade.md)",
		queue, vhost, topo.DeliveryLimitArg, limit, effect, limit)
}

type counts struct {
	Exchanges int `json:"exchanges"`
	Queues    int `json:"queues"`
	Bindings  int `json:"bindings"`
	// DelayQueues: with -retry-delays only.
	DelayQueues int `json:"delay_queues,omitempty"`
}
