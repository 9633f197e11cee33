package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"eaimq/internal/broker"
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
	// RabbitMQ 4 lists a classic queue's type among its arguments, which
	// 3.x leaves out: the same queue either way.
	out = []byte(strings.NewReplacer(`{"x-queue-type","classic"},`, "", `,{"x-queue-type","classic"}`, "", `{"x-queue-type","classic"}`, "").Replace(string(out)))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	slices.Sort(lines)
	// The contract's two queues, and the archive dlq purge moves dead
	// letters to, with its 14 days' TTL.
	if len(lines) != 3 {
		t.Fatalf("want exactly 3 queues, got:\n%s", out)
	}
	if !strings.HasPrefix(lines[0], "claim.dead\ttrue\t[]") {
		t.Errorf("claim.dead: got %q", lines[0])
	}
	if lines[1] != `claim.dead.archive	true	[{"x-message-ttl",1209600000}]` {
		t.Errorf("claim.dead.archive: got %q", lines[1])
	}
	in := lines[2]
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
	// The archive is dlq's, not the lab's: missing, it is a warning.
	if !strings.Contains(stdout, "warn    queue claim.dead.archive (durable, x-message-ttl=1209600000): missing: dlq purge refuses") {
		t.Errorf("-check does not warn of the missing archive:\n%s", stdout)
	}
	if q := vh.Queues(t); len(q) != 0 {
		t.Errorf("-check created queues: %v", q)
	}
}

// TestUsage: -h prints the usage and the flags of doc.go's package
// comment on stdout and exits 0, -h full all of it;
// -version names the program; a mistake in the flags, or an argument
// after them, is two lines on stderr (what is wrong, where the manual is),
// exit 2, nothing on stdout. None of these dials the broker.
func TestUsage(t *testing.T) {
	manual := cli.Manual(doc)
	if !strings.HasPrefix(manual, "Topology declares") || !strings.Contains(manual, "Exit status:") {
		t.Fatalf("the manual is not doc.go's package comment:\n%s", manual)
	}
	help := cli.Help(doc, "topology")
	see := cli.SeeManual("topology") + "\n"
	brokertest.CheckUsage(t, "topology", manual, []brokertest.UsageCase{
		{[]string{"-h"}, 0, help, ""},
		{[]string{"--help"}, 0, help, ""},
		{[]string{"-check", "-json", "-h"}, 0, help, ""},
		{[]string{"-h", "full"}, 0, manual, ""},
		{[]string{"-check", "--help", "full"}, 0, manual, ""},
		{[]string{"-version"}, 0, "topology ", ""},
		{[]string{"--version"}, 0, "topology ", ""},
		{[]string{"-bogus"}, 2, "", "flag provided but not defined: -bogus\n" + see},
		{[]string{"-nope"}, 2, "", "flag provided but not defined: -nope\n" + see},
		{[]string{"-chekc"}, 2, "", "flag provided but not defined: -chekc\ndid you mean -check?\n" + see},
		{[]string{"--retry-delay", "1s"}, 2, "", "flag provided but not defined: -retry-delay\ndid you mean --retry-delays?\n" + see},
		{[]string{"extra"}, 2, "", "topology: unexpected argument \"extra\"\n" + see},
		{[]string{"-check", "extra"}, 2, "", "topology: unexpected argument \"extra\"\n" + see},
	}, func(args []string, stdout, stderr io.Writer) error {
		// An address nothing listens on: a test that dialed would fail.
		getenv := func(k string) string { return map[string]string{broker.EnvURL: "amqp://guest:guest@127.0.0.1:1/x"}[k] }
		return run(context.Background(), args, getenv, stdout, stderr)
	})
}

// TestJSON: -json prints one JSON object on stdout, for a declaration and
// for -check, the missing pieces named with ok false and exit 78 on an
// empty vhost, every piece ok after the declaration.
func TestJSON(t *testing.T) {
	vh := brokertest.New(t)
	type item struct {
		What   string
		OK     *bool
		Detail *string
		Warn   bool
	}
	type result struct {
		VHost    *string `json:"vhost"`
		OK       *bool   `json:"ok"`
		Items    []item  `json:"items"`
		Notes    []string
		Declared *struct{ Exchanges, Queues, Bindings int }
		Archive  *struct {
			Queue       string
			RetentionMS int64 `json:"retention_ms"`
		}
		// The pre-upgrade check's findings, after -check (upgrade_test.go).
		Upgrade *struct {
			Broker, Version string
			OK              bool
			Items           []item
			Notes           []string
		}
	}
	decode := func(args []string, stdout string) result {
		t.Helper()
		if strings.Count(stdout, "\n") != 1 {
			t.Fatalf("%q: stdout is not one line:\n%s", args, stdout)
		}
		var r result
		dec := json.NewDecoder(strings.NewReader(stdout))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%q: %v:\n%s", args, err, stdout)
		}
		if r.VHost == nil || *r.VHost != vh.Name {
			t.Errorf("%q: vhost %v, want %q", args, r.VHost, vh.Name)
		}
		return r
	}
	check := func(wantCode int, wantBad []string) {
		t.Helper()
		code, stdout, stderr := runTopology(t, vh, "-check", "-json")
		if code != wantCode {
			t.Fatalf("-check -json: exit %d, want %d\n%s", code, wantCode, stderr)
		}
		r := decode([]string{"-check", "-json"}, stdout)
		if r.OK == nil || *r.OK != (wantCode == 0) || r.Declared != nil || len(r.Notes) != 0 || r.Upgrade == nil || len(r.Upgrade.Items) == 0 {
			t.Errorf("-check -json: %s", stdout)
		}
		var bad []string
		for _, it := range r.Items {
			if it.Warn {
				// The archive, missing: not ok, and not a problem.
				if it.What != "queue claim.dead.archive (durable, x-message-ttl=1209600000)" || *it.OK || wantCode == 0 {
					t.Errorf("warning %+v", it)
				}
				continue
			}
			if it.What == "" || it.OK == nil || it.Detail == nil || (*it.Detail == "") != *it.OK {
				t.Errorf("item %+v: want what, ok and detail, a detail when not ok", it)
				continue
			}
			if !*it.OK {
				bad = append(bad, it.What+": "+*it.Detail)
			}
		}
		if len(r.Items) != 7 || !slices.Equal(bad, wantBad) {
			t.Errorf("%d items, problems %q; want 7 items and %q", len(r.Items), bad, wantBad)
		}
	}
	missing := func(what string) string { return what + ": missing (run topology)" }
	check(cli.ExitConfig, []string{
		missing("exchange eai.dlx (direct, durable)"),
		missing("exchange eai.claim (direct, durable)"),
		missing("queue claim.dead (durable)"),
		missing("queue claim.in (durable, x-dead-letter-exchange=eai.dlx, x-dead-letter-routing-key=claim.dead)"),
		missing("binding eai.claim -> claim.in (key claim)"),
		missing("binding eai.dlx -> claim.dead (key claim.dead)"),
	})

	code, stdout, stderr := runTopology(t, vh, "-json")
	if code != 0 {
		t.Fatalf("-json: exit %d\n%s", code, stderr)
	}
	r := decode([]string{"-json"}, stdout)
	if r.Declared == nil || *r.Declared != (struct{ Exchanges, Queues, Bindings int }{2, 2, 2}) ||
		r.Archive == nil || r.Archive.Queue != "claim.dead.archive" || r.Archive.RetentionMS != 1209600000 || r.OK != nil || r.Items != nil || r.Upgrade != nil {
		t.Errorf("-json: %s", stdout)
	}
	check(0, nil)
}

// TestBadInputs: each way the address or the arguments can be wrong ends
// in its documented exit code, with the fix on the first line of stderr as
// main prints it, and never the password.
func TestBadInputs(t *testing.T) {
	vh := brokertest.New(t)
	u, err := url.Parse(vh.URL)
	if err != nil {
		t.Fatal(err)
	}
	const pw = "S3ntinel-pw"
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}()
	for _, tc := range []struct {
		name, url string
		args      []string
		code      int
		first     string // the first line of stderr starts with this
		has       string // and says this
	}{
		{"unparsable URL", "amqp://guest:" + pw + "%zz@" + u.Host + "/x", nil, cli.ExitUsage,
			"topology: invalid AMQP URL amqp://guest:xxxxx@", `"%" as %25`},
		{"bad port", "amqp://guest:" + pw + "@127.0.0.1:99999/x", nil, cli.ExitUsage,
			"topology: invalid AMQP URL amqp://guest:xxxxx@127.0.0.1:99999/x", "out of range"},
		{"unknown vhost", "amqp://guest:guest@" + u.Host + "/no-such-" + vh.Name, nil, cli.ExitConfig,
			"topology: connect to amqp://guest:xxxxx@", "rabbitmqctl add_vhost no-such-" + vh.Name},
		{"wrong password", "amqp://guest:" + pw + "@" + u.Host + u.EscapedPath(), nil, cli.ExitNoPerm,
			"topology: connect to amqp://guest:xxxxx@", "check the user and password"},
		{"unreachable", "amqp://guest:" + pw + "@" + closed + "/x", nil, cli.ExitUnavailable,
			"topology: connect to amqp://guest:xxxxx@" + closed + "/x", "is the broker up? (scripts/mq-up.sh starts one)"},
		{"unexpected argument", vh.URL, []string{"extra"}, cli.ExitUsage,
			"topology: unexpected argument \"extra\"", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			getenv := func(k string) string { return map[string]string{broker.EnvURL: tc.url}[k] }
			err := run(context.Background(), tc.args, getenv, &out, &errb)
			cli.Report(&errb, "topology", err) // as main does
			stderr := errb.String()
			first, _, _ := strings.Cut(stderr, "\n")
			if got := cli.Code(err); got != tc.code {
				t.Errorf("exit %d, want %d\n%s", got, tc.code, stderr)
			}
			if !strings.HasPrefix(first, tc.first) || !strings.Contains(first, tc.has) {
				t.Errorf("first line of stderr:\n %s\nwant it to start %q and say %q", first, tc.first, tc.has)
			}
			if strings.Contains(stderr+out.String(), pw) {
				t.Errorf("the password shows:\n%s%s", out.String(), stderr)
			}
		})
	}
}

// TestInterruptWhileDialing: a peer that accepts the TCP connection and
// never answers would hold the AMQP handshake for the whole -timeout;
// SIGINT must end topology within a second, with exit 130.
func TestInterruptWhileDialing(t *testing.T) {
	url, accepted := brokertest.SilentBroker(t)
	cmd := exec.Command(brokertest.Binary(t, "eaimq/topology"), "-timeout", "60s")
	cmd.Env = append(os.Environ(), broker.EnvURL+"="+url)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if took := brokertest.InterruptWhileConnecting(t, cmd, accepted); took > time.Second {
		t.Errorf("topology exited %s after SIGINT, want within 1s", took)
	}
	if code := cmd.ProcessState.ExitCode(); code != cli.ExitInterrupted || !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("exit %d, want %d saying it was interrupted:\n%s", code, cli.ExitInterrupted, errb.String())
	}
}

// TestStalledAfterHandshake: a node that takes the connection and then
// stops answering (every frame on a channel dropped, the heartbeats
// passed) leaves topology with exit 69 and the reason within about
// -timeout, not hanging on its first declare.
func TestStalledAfterHandshake(t *testing.T) {
	vh := brokertest.New(t)
	url, stalled := brokertest.StallAfterHandshake(t, vh.URL)
	start := time.Now()
	var out, errb bytes.Buffer
	done := make(chan error, 1)
	go func() {
		env := vh.Getenv(nil)
		getenv := func(k string) string {
			if k == broker.EnvURL {
				return url // through the proxy that stalls
			}
			return env(k)
		}
		done <- run(context.Background(), []string{"-timeout", "2s"}, getenv, &out, &errb)
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("topology still running 20s after it started with -timeout 2s")
	}
	took := time.Since(start)
	select {
	case <-stalled:
	default:
		t.Fatalf("the proxy never dropped a frame: the fault did not happen (%v)", err)
	}
	if code := cli.Code(err); code != cli.ExitUnavailable || err == nil || !strings.Contains(err.Error(), "did not answer the declares within 2s") {
		t.Errorf("exit %d (%v), want %d naming the stall", code, err, cli.ExitUnavailable)
	}
	// -timeout for the dial, -timeout for the declares, and slack for a
	// loaded machine.
	if took > 2*time.Second+2*time.Second+6*time.Second {
		t.Errorf("topology took %s with -timeout 2s", took)
	}
	if strings.Contains(out.String(), "declared") {
		t.Errorf("topology said it declared: %s", out.String())
	}
}
