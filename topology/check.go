package main

import (
	"context"
	"fmt"
	"io"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/rabbitctl"
	"eaimq/internal/topo"
)

// runCheck verifies every object of the contract and declares nothing that
// is missing. Each probe gets its own channel, because a failed passive
// declare or a 406 closes the channel it came on.
func runCheck(ctx context.Context, conn *amqp.Connection, raw, vhost string, stdout io.Writer) error {
	bad := 0
	report := func(ok bool, what, detail string) {
		status := "ok     "
		if !ok {
			status = "PROBLEM"
			bad++
		}
		if detail != "" {
			what += ": " + detail
		}
		fmt.Fprintf(stdout, "%s %s\n", status, what)
	}
	probe := func(passive, redeclare func(*amqp.Channel) error, what string) error {
		ch, err := conn.Channel()
		if err != nil {
			return cli.Exit(cli.ExitUnavailable, fmt.Errorf("open channel: %w", err))
		}
		if err := passive(ch); err != nil {
			if broker.Code(err) == amqp.NotFound {
				report(false, what, "missing (run topology)")
				return nil
			}
			return cli.Exit(cli.ExitUnavailable, fmt.Errorf("check %s: %w", what, err))
		}
		// It exists, so redeclaring with the wanted properties creates
		// nothing: it is a no-op if they match and a 406 if they differ.
		if err := redeclare(ch); err != nil {
			if broker.Code(err) == amqp.PreconditionFailed {
				report(false, what, "differs: "+broker.Reason(err))
				return nil
			}
			return cli.Exit(cli.ExitUnavailable, fmt.Errorf("check %s: %w", what, err))
		}
		ch.Close()
		report(true, what, "")
		return nil
	}
	for _, s := range topo.Exchanges {
		err := probe(func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(s.Name, s.Kind, true, false, false, false, nil)
		}, func(ch *amqp.Channel) error { return topo.DeclareExchange(ch, s) }, s.String())
		if err != nil {
			return err
		}
	}
	for _, s := range topo.Queues {
		err := probe(func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(s.Name, true, false, false, false, nil)
			return err
		}, func(ch *amqp.Channel) error { return topo.DeclareQueue(ch, s) }, s.String())
		if err != nil {
			return err
		}
	}
	checkBindings(ctx, raw, vhost, stdout, report)
	if bad > 0 {
		return cli.Exitf(cli.ExitConfig, "%d part(s) of the topology missing or different in vhost %q", bad, vhost)
	}
	return nil
}

// checkBindings reads the bindings with rabbitmqctl, the only way to list
// them; over AMQP a binding can be created but not seen.
func checkBindings(ctx context.Context, raw, vhost string, stdout io.Writer, report func(bool, string, string)) {
	if !broker.IsLocal(raw) {
		fmt.Fprintln(stdout, "note    bindings not verified: the broker is not on this machine, and AMQP 0-9-1 cannot list bindings")
		return
	}
	ctl, err := rabbitctl.Detect(ctx)
	var have []rabbitctl.Binding
	if err == nil {
		have, err = ctl.ListBindings(ctx, vhost)
	}
	if err != nil {
		fmt.Fprintf(stdout, "note    bindings not verified: rabbitmqctl failed: %v\n", err)
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
			report(true, want.String(), "")
		} else {
			report(false, want.String(), "missing (run topology)")
		}
	}
}
