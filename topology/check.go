package main

import (
	"context"
	"fmt"
	"io"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/rabbitctl"
	"eaimq/internal/retry"
	"eaimq/internal/topo"
)

// checked is the result of -check, as -json prints it.
type checked struct {
	VHost string   `json:"vhost"`
	OK    bool     `json:"ok"`
	Items []item   `json:"items"`
	Notes []string `json:"notes,omitempty"`
}

// item is one object of the contract and what -check found.
type item struct {
	What   string `json:"what"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// checkReport collects what -check finds. As text each finding is printed
// at once; as JSON the whole result is printed at the end, and only if the
// check finished.
type checkReport struct {
	checked
	text io.Writer // nil for -json
	bad  int
}

func (c *checkReport) report(ok bool, what, detail string) {
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

func (c *checkReport) note(s string) {
	c.Notes = append(c.Notes, s)
	if c.text != nil {
		fmt.Fprintf(c.text, "note    %s\n", s)
	}
}

// runCheck verifies every object of the contract and declares nothing that
// is missing. Each probe gets its own channel, because a failed passive
// declare or a 406 closes the channel it came on.
func runCheck(ctx context.Context, conn *amqp.Connection, raw, vhost string, kind topo.QueueType, plan retry.Plan, stdout io.Writer, asJSON bool) error {
	c := &checkReport{checked: checked{VHost: vhost, Items: []item{}}, text: stdout}
	if asJSON {
		c.text = nil
	}
	probe := func(passive, redeclare func(*amqp.Channel) error, what string, differs func(reason string) string) error {
		ch, err := conn.Channel()
		if err != nil {
			return cli.Exit(cli.ExitUnavailable, fmt.Errorf("open channel: %w", err))
		}
		if err := passive(ch); err != nil {
			if broker.Code(err) == amqp.NotFound {
				c.report(false, what, "missing (run topology)")
				return nil
			}
			return cli.Exit(cli.ExitUnavailable, fmt.Errorf("check %s: %w", what, err))
		}
		// It exists, so redeclaring with the wanted properties creates
		// nothing: it is a no-op if they match and a 406 if they differ.
		if err := redeclare(ch); err != nil {
			if broker.Code(err) == amqp.PreconditionFailed {
				c.report(false, what, differs(broker.Reason(err)))
				return nil
			}
			return cli.Exit(cli.ExitUnavailable, fmt.Errorf("check %s: %w", what, err))
		}
		ch.Close()
		c.report(true, what, "")
		return nil
	}
	for _, s := range topo.Exchanges {
		err := probe(func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(s.Name, s.Kind, true, false, false, false, nil)
		}, func(ch *amqp.Channel) error { return topo.DeclareExchange(ch, s) }, s.String(), differ)
		if err != nil {
			return err
		}
	}
	for _, s := range topo.QueuesFor(kind) {
		err := probe(func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(s.Name, true, false, false, false, nil)
			return err
		}, func(ch *amqp.Channel) error { return topo.DeclareQueue(ch, s) }, s.String(), func(reason string) string {
			// The broker names one differing argument; when the queue is
			// of the other type, that is the news, and it has a remedy.
			if st, err := topo.InspectQueue(conn, s.Name); err == nil && st.Type == kind.Other() {
				return fmt.Sprintf("a %s queue, not %s (%d ready); topology -migrate %s moves it, claims and all", st.Type, kind, st.Messages, kind)
			}
			return differ(reason)
		})
		if err != nil {
			return err
		}
	}
	for _, d := range plan.Queues() {
		s := topo.RetryQueue(kind, retry.QueueName(d), d)
		err := probe(func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(s.Name, true, false, false, false, nil)
			return err
		}, func(ch *amqp.Channel) error { return topo.DeclareQueue(ch, s) }, s.String(), differ)
		if err != nil {
			return err
		}
	}
	checkBindings(ctx, raw, vhost, c)
	c.OK = c.bad == 0
	if asJSON {
		writeJSON(stdout, c.checked)
	}
	if c.bad > 0 {
		return cli.Exitf(cli.ExitConfig, "%d part(s) of the topology missing or different in vhost %q", c.bad, vhost)
	}
	return nil
}

func differ(reason string) string { return "differs: " + reason }

// checkBindings reads the bindings with rabbitmqctl, the only way to list
// them; over AMQP a binding can be created but not seen.
func checkBindings(ctx context.Context, raw, vhost string, c *checkReport) {
	if !broker.IsLocal(raw) {
		c.note("bindings not verified: the broker is not on this machine, and AMQP 0-9-1 cannot list bindings")
		return
	}
	ctl, err := rabbitctl.Detect(ctx)
	var have []rabbitctl.Binding
	if err == nil {
		have, err = ctl.ListBindings(ctx, vhost)
	}
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
