package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/rabbitctl"
)

func runTopology(t *testing.T, vh *brokertest.VHost, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, vh.Getenv(nil), &out, &errb)
	if err != nil {
		errb.WriteString(err.Error())
	}
	return cli.Code(err), out.String(), errb.String()
}

func TestDeclareTwiceMatchesContract(t *testing.T) {
	vh := brokertest.New(t)
	for i := 1; i <= 2; i++ {
		if code, _, stderr := runTopology(t, vh); code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, code, stderr)
		}
	}
	ctx := context.Background()
	out, err := vh.Ctl.Run(ctx, "-q", "list_exchanges", "-p", vh.Name, "--no-table-headers", "name", "type", "durable", "auto_delete", "internal")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"eai.claim\tdirect\ttrue\tfalse\tfalse", "eai.dlx\tdirect\ttrue\tfalse\tfalse"} {
		if !slices.Contains(strings.Split(string(out), "\n"), want) {
			t.Errorf("list_exchanges lacks %q:\n%s", want, out)
		}
	}
	out, err = vh.Ctl.Run(ctx, "-q", "list_queues", "-p", vh.Name, "--no-table-headers", "name", "durable", "arguments")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	slices.Sort(lines)
	if len(lines) != 2 {
		t.Fatalf("want exactly 2 queues, got:\n%s", out)
	}
	if !strings.HasPrefix(lines[0], "claim.dead\ttrue\t[]") {
		t.Errorf("claim.dead: got %q", lines[0])
	}
	in := lines[1]
	for _, want := range []string{"claim.in\ttrue\t", `{"x-dead-letter-exchange","eai.dlx"}`, `{"x-dead-letter-routing-key","claim.dead"}`} {
		if !strings.Contains(in, want) {
			t.Errorf("claim.in lacks %s: %q", want, in)
		}
	}
	bs, err := vh.Ctl.ListBindings(ctx, vh.Name)
	if err != nil {
		t.Fatal(err)
	}
	var got []rabbitctl.Binding
	for _, b := range bs {
		if b.Source != "" { // skip the default exchange's implicit bindings
			got = append(got, b)
		}
	}
	want := []rabbitctl.Binding{
		{Source: "eai.claim", Destination: "claim.in", DestinationKind: "queue", RoutingKey: "claim"},
		{Source: "eai.dlx", Destination: "claim.dead", DestinationKind: "queue", RoutingKey: "claim.dead"},
	}
	slices.SortFunc(got, func(a, b rabbitctl.Binding) int { return strings.Compare(a.Source, b.Source) })
	if !slices.Equal(got, want) {
		t.Errorf("bindings:\n got %v\nwant %v", got, want)
	}
	if code, stdout, stderr := runTopology(t, vh, "-check"); code != 0 || strings.Contains(stdout, "PROBLEM") {
		t.Errorf("-check after declare: exit %d\n%s%s", code, stdout, stderr)
	}
}

func TestConflictingQueueIsExplained(t *testing.T) {
	vh := brokertest.New(t)
	ch := vh.Channel(t)
	// claim.in declared first without the DLX arguments, as a hand-made
	// queue or an older script would leave it.
	if _, err := ch.QueueDeclare("claim.in", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runTopology(t, vh)
	if code != cli.ExitConfig {
		t.Fatalf("exit %d, want %d: %s", code, cli.ExitConfig, stderr)
	}
	for _, want := range []string{"x-dead-letter-exchange", "claim.in", "wanted", "remedy"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("message lacks %q:\n%s", want, stderr)
		}
	}
	code, stdout, _ := runTopology(t, vh, "--check")
	if code != cli.ExitConfig || !strings.Contains(stdout, "PROBLEM queue claim.in") || !strings.Contains(stdout, "x-dead-letter-exchange") {
		t.Errorf("-check: exit %d, want %d and the differing argument named:\n%s", code, cli.ExitConfig, stdout)
	}
}

func TestCheckChangesNothing(t *testing.T) {
	vh := brokertest.New(t)
	code, stdout, _ := runTopology(t, vh, "-check")
	if code != cli.ExitConfig {
		t.Fatalf("-check on an empty vhost: exit %d, want %d", code, cli.ExitConfig)
	}
	if n := strings.Count(stdout, "PROBLEM"); n != 6 {
		t.Errorf("want 6 problems (2 exchanges, 2 queues, 2 bindings), got %d:\n%s", n, stdout)
	}
	if q := vh.Queues(t); len(q) != 0 {
		t.Errorf("-check created queues: %v", q)
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-h"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"-nope"}, 2},
		{[]string{"extra"}, 2},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), tc.args, func(string) string { return "" }, &out, &errb)
		if got := cli.Code(err); got != tc.code {
			t.Errorf("%v: exit %d, want %d", tc.args, got, tc.code)
		}
	}
}

func TestUnreachableBrokerIsRedacted(t *testing.T) {
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		return map[string]string{"EAI_AMQP_URL": "amqp://guest:s3cret@127.0.0.1:1/x"}[k]
	}
	err := run(context.Background(), nil, getenv, &out, &errb)
	if cli.Code(err) != cli.ExitUnavailable {
		t.Fatalf("exit %d, want %d (%v)", cli.Code(err), cli.ExitUnavailable, err)
	}
	if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "mq-up.sh") {
		t.Errorf("message: %v", err)
	}
}
