// Package check verifies the topology contract in a vhost (topology
// -check) and changes nothing: each exchange and queue is probed over
// AMQP, the bindings are read with rabbitmqctl, and every finding is
// reported, as text at once or as one JSON object at the end.
package check

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/fail"
	"eaimq/internal/rabbitctl"
	"eaimq/internal/retry"
	"eaimq/internal/topo"
)

// Config is what to check.
type Config struct {
	// URL is the broker's address as given (EAI_AMQP_URL): the bindings
	// are read with rabbitmqctl only when it is on this machine.
	URL   string
	VHost string
	Kind  topo.QueueType // the type claim.in and claim.dead should be
	Plan  retry.Plan     // the consumer's delay queues to check too
	JSON  bool           // one JSON object at the end instead of lines
	// Ctl is the broker's rabbitmqctl (EAIMQ_RABBITMQCTL); nil: the node
	// found on this machine, when the broker is here and that is it.
	Ctl *rabbitctl.Ctl
	// Strict makes a finding of the pre-upgrade check (RabbitMQ 4.x) a
	// Failed error (exit 1), once the contract itself is as it should be.
	Strict bool
	// Archive is topology's -archive-retention: claim.dead.archive is
	// checked with it (0: not checked).
	Archive time.Duration
}

// checked is the result of a check, as -json prints it.
type checked struct {
	VHost string   `json:"vhost"`
	OK    bool     `json:"ok"`
	Items []item   `json:"items"`
	Notes []string `json:"notes,omitempty"`
	// Upgrade is the pre-upgrade check: what would change or break on
	// RabbitMQ 4.x. Its findings never make OK false.
	Upgrade *upgraded `json:"upgrade,omitempty"`
}

// item is one object of the contract and what the check found.
type item struct {
	What   string `json:"what"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	// Warn: not as it should be, and yet no problem of the contract
	// (a missing archive: dlq purge refuses, nothing else changes).
	Warn bool `json:"warn,omitempty"`
}

// report collects what the check finds. As text each finding is printed
// at once; as JSON the whole result is printed at the end, and only if the
// check finished.
type report struct {
	checked
	text io.Writer // nil for JSON
	bad  int
	// ours is what InspectQueue found of claim.in and claim.dead, for the
	// pre-upgrade check.
	ours map[string]topo.QueueState
}

func (c *report) report(ok bool, what, detail string) {
	c.Items = append(c.Items, item{What: what, OK: ok, Detail: detail})
	if !ok {
		c.bad++
	}
	if c.text == nil {
		return
	}
	status := "ok     "
	if !ok {
		status = "PROBLEM"
	}
	if detail != "" {
		what += ": " + detail
	}
	fmt.Fprintf(c.text, "%s %s\n", status, what)
}

// warn is a finding that is not a problem of the contract: it is shown,
// and does not make the check fail.
func (c *report) warn(what, detail string) {
	c.Items = append(c.Items, item{What: what, Detail: detail, Warn: true})
	if c.text != nil {
		fmt.Fprintf(c.text, "warn    %s: %s\n", what, detail)
	}
}

func (c *report) note(s string) {
	c.Notes = append(c.Notes, s)
	if c.text != nil {
		fmt.Fprintf(c.text, "note    %s\n", s)
	}
}

// Run verifies every object of the contract on conn and declares nothing
// that is missing, printing its findings on stdout. A missing or
// differing piece is a Config error once all are reported; a broker that
// fails midway is Unavailable, and then JSON prints nothing.
func Run(ctx context.Context, conn *amqp.Connection, cfg Config, stdout io.Writer) error {
	c := &report{checked: checked{VHost: cfg.VHost, Items: []item{}}, text: stdout, ours: map[string]topo.QueueState{}}
	if cfg.JSON {
		c.text = nil
	}
	if err := c.objects(conn, cfg); err != nil {
		return err
	}
	ctl, why := nodeOf(ctx, cfg)
	c.bindings(ctx, cfg, ctl, why)
	up := c.upgrade(ctx, conn, cfg, ctl, why)
	c.OK = c.bad == 0
	if cfg.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false) // "->" as it is
		enc.Encode(c.checked)    // strings and booleans: only the write can fail, as with text
	}
	// The contract first: its problems keep their exit 78 whatever -strict.
	if c.bad > 0 {
		return fail.Errorf(fail.Config, "%d part(s) of the topology missing or different in vhost %q", c.bad, cfg.VHost)
	}
	if cfg.Strict && up.warnings > 0 {
		return fail.Errorf(fail.Failed, "%d finding(s) for RabbitMQ 4.x in vhost %q (-strict)", up.warnings, cfg.VHost)
	}
	return nil
}

// objects checks the exchanges, the queues of cfg.Kind and the delay
// queues of cfg.Plan, in the contract's order.
func (c *report) objects(conn *amqp.Connection, cfg Config) error {
	for _, s := range topo.Exchanges {
		err := c.probe(conn, func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(s.Name, s.Kind, true, false, false, false, nil)
		}, func(ch *amqp.Channel) error { return topo.DeclareExchange(ch, s) }, s.String(), differ)
		if err != nil {
			return err
		}
	}
	kind := cfg.Kind
	for _, s := range topo.QueuesFor(kind) {
		err := c.probeQueue(conn, s, func(reason string) (bool, string) {
			// The broker names one differing argument; when the queue is
			// of the other type, that is the news, and it has a remedy.
			st, err := topo.InspectQueue(conn, s.Name)
			switch {
			case err == nil && st.Type == kind.Other():
				return false, fmt.Sprintf("a %s queue, not %s (%d ready); topology -migrate %s moves it, claims and all", st.Type, kind, st.Messages, kind)
			case err == nil && st.Type == kind && st.NoLimit:
				// As an older eaimq declared it: the contract holds, and
				// topology keeps it; the 4.x lines say what it lacks.
				return true, "declared without " + topo.DeliveryLimitArg + " (kept as it is; see the 4.x lines)"
			}
			return differ(reason)
		})
		if err != nil {
			return err
		}
	}
	if err := c.archive(conn, cfg); err != nil {
		return err
	}
	for _, d := range cfg.Plan.Queues() {
		if err := c.probeQueue(conn, topo.RetryQueue(kind, retry.QueueName(d), d), differ); err != nil {
			return err
		}
	}
	for _, name := range []string{topo.Queue, topo.DeadQueue} {
		st, err := topo.InspectQueue(conn, name)
		if err != nil {
			return fail.New(fail.Unavailable, err)
		}
		c.ours[name] = st
	}
	return nil
}

// archive checks claim.dead.archive. A missing one is a warning, not a
// problem: the lab's contract holds without it, and dlq purge refuses
// (78) until topology declares it or -no-archive says to purge for good.
// One that differs is a problem, as for any queue: topology itself would
// stop there with a 406.
func (c *report) archive(conn *amqp.Connection, cfg Config) error {
	if cfg.Archive == 0 {
		return nil
	}
	s := topo.ArchiveSpec(cfg.Kind, cfg.Archive)
	ch, err := conn.Channel()
	if err != nil {
		return fail.New(fail.Unavailable, fmt.Errorf("open channel: %w", err))
	}
	if _, err := ch.QueueDeclarePassive(s.Name, true, false, false, false, nil); err != nil {
		if broker.Code(err) == amqp.NotFound {
			c.warn(s.String(), "missing: dlq purge refuses until it exists (run topology), or purges for good with -no-archive")
			return nil
		}
		return fail.New(fail.Unavailable, fmt.Errorf("check %s: %w", s, err))
	}
	ch.Close()
	return c.probeQueue(conn, s, func(reason string) (bool, string) {
		// Of the other type with this retention: topology keeps it.
		if _, err := topo.DeclareArchive(conn, cfg.Kind.Other(), cfg.Archive); err == nil {
			return true, "a " + string(cfg.Kind.Other()) + " queue (kept as it is: -migrate does not move the archive)"
		}
		return false, "differs: " + reason + " (topology -archive-retention gives the retention it has, in ms after \"current is\")"
	})
}

func (c *report) probeQueue(conn *amqp.Connection, s topo.QueueSpec, differs func(reason string) (ok bool, detail string)) error {
	return c.probe(conn, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(s.Name, true, false, false, false, nil)
		return err
	}, func(ch *amqp.Channel) error { return topo.DeclareQueue(ch, s) }, s.String(), differs)
}

// probe checks one object on a channel of its own, because a failed
// passive declare or a 406 closes the channel it came on.
func (c *report) probe(conn *amqp.Connection, passive, redeclare func(*amqp.Channel) error, what string, differs func(reason string) (ok bool, detail string)) error {
	ch, err := conn.Channel()
	if err != nil {
		return fail.New(fail.Unavailable, fmt.Errorf("open channel: %w", err))
	}
	if err := passive(ch); err != nil {
		if broker.Code(err) == amqp.NotFound {
			c.report(false, what, "missing (run topology)")
			return nil
		}
		return fail.New(fail.Unavailable, fmt.Errorf("check %s: %w", what, err))
	}
	// It exists, so redeclaring with the wanted properties creates
	// nothing: it is a no-op if they match and a 406 if they differ.
	if err := redeclare(ch); err != nil {
		if broker.Code(err) == amqp.PreconditionFailed {
			ok, detail := differs(broker.Reason(err))
			c.report(ok, what, detail)
			return nil
		}
		return fail.New(fail.Unavailable, fmt.Errorf("check %s: %w", what, err))
	}
	ch.Close()
	c.report(true, what, "")
	return nil
}

func differ(reason string) (bool, string) { return false, "differs: " + reason }

// bindings reads the bindings with rabbitmqctl (ctl, or why there is
// none), the only way to list them; over AMQP a binding can be created
// but not seen.
func (c *report) bindings(ctx context.Context, cfg Config, ctl rabbitctl.Ctl, why string) {
	if why != "" {
		c.note("bindings not verified: " + why)
		return
	}
	have, err := ctl.ListBindings(ctx, cfg.VHost)
	if err != nil {
		c.note(fmt.Sprintf("bindings not verified: rabbitmqctl failed: %v", err))
		return
	}
	for _, want := range topo.Bindings {
		found := false
		for _, b := range have {
			if b.Source == want.Exchange && b.Destination == want.Queue && b.DestinationKind == "queue" && b.RoutingKey == want.Key {
				found = true
			}
		}
		if found {
			c.report(true, want.String(), "")
		} else {
			c.report(false, want.String(), "missing (run topology)")
		}
	}
}

// nodeOf is the rabbitmqctl of the broker at cfg.URL: cfg.Ctl, else the
// node found on this machine when it is the one listening on the URL's
// port (a second node here, such as a RabbitMQ 4 beside the system's 3.x,
// is another broker). why says why there is none.
func nodeOf(ctx context.Context, cfg Config) (ctl rabbitctl.Ctl, why string) {
	if cfg.Ctl != nil {
		return *cfg.Ctl, ""
	}
	if !broker.IsLocal(cfg.URL) {
		return ctl, "the broker is not on this machine, and AMQP 0-9-1 cannot list bindings (" + rabbitctl.EnvCtl + " names its rabbitmqctl)"
	}
	ctl, err := rabbitctl.Detect(ctx)
	var ports []int
	if err == nil {
		ports, err = ctl.AMQPPorts(ctx)
	}
	if err != nil {
		return ctl, fmt.Sprintf("rabbitmqctl failed: %v", err)
	}
	if port := broker.Port(cfg.URL); !slices.Contains(ports, port) {
		return ctl, fmt.Sprintf("the node rabbitmqctl reaches here (%s) does not listen on port %d; %s names the broker's rabbitmqctl", ctl.Node, port, rabbitctl.EnvCtl)
	}
	return ctl, ""
}
