package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/topo"
)

type runResult struct {
	code           int
	stdout, stderr string
}

func runPublish(t testing.TB, vh *brokertest.VHost, stdin string, args ...string) runResult {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, vh.Getenv(nil), strings.NewReader(stdin), &out, &errb)
	cli.Report(&errb, "publish", err)
	return runResult{cli.Code(err), out.String(), errb.String()}
}

func writeClaim(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPropertiesAndBody(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	// Odd spacing and a trailing newline: the body must be the file's bytes,
	// not a re-encoding.
	body := "{ \"guid\" : \"5f0c-aa\",\n  \"claimId\":\"C-2026-0001\", \"docs\":[\"receipt.pdf\"], \"amount\": 1200 }\n"
	f := writeClaim(t, t.TempDir(), "claim.json", body)
	if r := runPublish(t, vh, "", f); r.code != 0 {
		t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	got := vh.Drain(t, topo.Queue)
	if len(got) != 1 {
		t.Fatalf("claim.in holds %d messages, want 1", len(got))
	}
	d := got[0]
	if d.DeliveryMode != amqp.Persistent || d.MessageId != "5f0c-aa" || d.ContentType != "application/json" {
		t.Errorf("properties: delivery_mode=%d message_id=%q content_type=%q", d.DeliveryMode, d.MessageId, d.ContentType)
	}
	if string(d.Body) != body {
		t.Errorf("body changed:\n got %q\nwant %q", d.Body, body)
	}
	if d.Exchange != topo.Exchange || d.RoutingKey != topo.RoutingKey {
		t.Errorf("routed via %q/%q", d.Exchange, d.RoutingKey)
	}
}

func TestStdin(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	if r := runPublish(t, vh, `{"guid":"from-stdin"}`, "-"); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if got := vh.Drain(t, topo.Queue); len(got) != 1 || got[0].MessageId != "from-stdin" {
		t.Fatalf("got %d messages", len(got))
	}
}

func TestUnroutableIsAFailure(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	ch := vh.Channel(t)
	if err := ch.QueueUnbind(topo.Queue, topo.RoutingKey, topo.Exchange, nil); err != nil {
		t.Fatal(err)
	}
	f := writeClaim(t, t.TempDir(), "c.json", `{"guid":"lost-1"}`)
	r := runPublish(t, vh, "", f)
	if r.code != exitReturned {
		t.Fatalf("exit %d, want %d (returned): %s%s", r.code, exitReturned, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "c.json") || !strings.Contains(r.stderr, "unroutable") {
		t.Errorf("stderr does not name the file and the reason:\n%s", r.stderr)
	}
	if n := vh.Depth(t, topo.Queue); n != 0 {
		t.Errorf("claim.in holds %d", n)
	}
}

func TestNackIsAFailure(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	vh.Policy(t, "full", topo.Queue, `{"max-length":0,"overflow":"reject-publish"}`)
	f := writeClaim(t, t.TempDir(), "c.json", `{"guid":"refused-1"}`)
	r := runPublish(t, vh, "", f)
	if r.code != exitNacked {
		t.Fatalf("exit %d, want %d (nacked): %s%s", r.code, exitNacked, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "1 nacked") {
		t.Errorf("summary: %s", r.stdout)
	}
}

func TestMissingTopology(t *testing.T) {
	vh := brokertest.New(t)
	f := writeClaim(t, t.TempDir(), "c.json", `{"guid":"x"}`)
	r := runPublish(t, vh, "", f)
	if r.code != cli.ExitConfig || !strings.Contains(r.stderr, "run topology first") {
		t.Fatalf("exit %d, want %d with 'run topology first': %s", r.code, cli.ExitConfig, r.stderr)
	}
}

func TestBadInputPublishesNothing(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	dir := t.TempDir()
	big := writeClaim(t, dir, "big.json", `{"guid":"big","pad":"`+strings.Repeat("x", 2000)+`"}`)
	unreadable := writeClaim(t, dir, "secret.json", `{"guid":"s"}`)
	if err := os.Chmod(unreadable, 0); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, file, want string
		args             []string
	}{
		{"missing", filepath.Join(dir, "nope.json"), "no such file", nil},
		{"malformed", writeClaim(t, dir, "bad.json", `{"guid":`), "malformed JSON", nil},
		{"array", writeClaim(t, dir, "arr.json", `[{"guid":"a"}]`), "not an object", nil},
		{"no guid", writeClaim(t, dir, "noguid.json", `{"claimId":"C"}`), `no "guid"`, nil},
		{"empty guid", writeClaim(t, dir, "emptyguid.json", `{"guid":""}`), `"guid" is empty`, nil},
		{"number guid", writeClaim(t, dir, "numguid.json", `{"guid":7}`), "not a string", nil},
		{"too big", big, "limit", []string{"-max-bytes", "1000"}},
	}
	if os.Geteuid() != 0 { // root reads a mode-0 file anyway
		cases = append(cases, struct {
			name, file, want string
			args             []string
		}{"unreadable", unreadable, "permission denied", nil})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runPublish(t, vh, "", append(tc.args, tc.file)...)
			if r.code != cli.ExitDataErr {
				t.Errorf("exit %d, want %d: %s", r.code, cli.ExitDataErr, r.stderr)
			}
			if !strings.Contains(r.stderr, filepath.Base(tc.file)) || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr lacks the file name or %q:\n%s", tc.want, r.stderr)
			}
		})
	}
	if n := vh.Depth(t, topo.Queue); n != 0 {
		t.Errorf("bad input published %d message(s)", n)
	}
}

func TestMixedBatch(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	dir := t.TempDir()
	files := []string{
		writeClaim(t, dir, "a.json", `{"guid":"a"}`),
		writeClaim(t, dir, "bad.json", `not json`),
		writeClaim(t, dir, "c.json", `{"guid":"c"}`),
	}
	r := runPublish(t, vh, "", files...)
	if r.code != cli.ExitDataErr || vh.Depth(t, topo.Queue) != 0 {
		t.Fatalf("without -keep-going: exit %d, want %d and nothing published: %s", r.code, cli.ExitDataErr, r.stdout)
	}
	r = runPublish(t, vh, "", append([]string{"-keep-going"}, files...)...)
	if r.code != cli.ExitDataErr || !strings.Contains(r.stdout, "2 sent") || !strings.Contains(r.stdout, "1 invalid") {
		t.Fatalf("with -keep-going: exit %d, summary %q", r.code, r.stdout)
	}
	if n := vh.Depth(t, topo.Queue); n != 2 {
		t.Errorf("claim.in holds %d, want 2", n)
	}
}

func TestBulkThousandArriveOnce(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	dir := t.TempDir()
	const n = 1000
	var files []string
	for i := range n {
		files = append(files, writeClaim(t, dir, fmt.Sprintf("c%04d.json", i),
			fmt.Sprintf(`{"guid":"bulk-%04d","claimId":"C-%04d","docs":["r.pdf"]}`, i, i)))
	}
	r := runPublish(t, vh, "", append([]string{"-window", "64"}, files...)...)
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("%d sent, 0 returned, 0 nacked, 0 invalid", n)) {
		t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	seen := map[string]int{}
	for _, d := range vh.Drain(t, topo.Queue) {
		seen[d.MessageId]++
	}
	for i := range n {
		if id := fmt.Sprintf("bulk-%04d", i); seen[id] != 1 {
			t.Errorf("%s arrived %d times", id, seen[id])
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct ids arrived, want %d", len(seen), n)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"-window", "0", "x"}, {"-nope", "x"}, {"-", "-"}, {"-progress", "sometimes", "x"}} {
		var out, errb bytes.Buffer
		err := run(context.Background(), args, func(string) string { return "" }, strings.NewReader(""), &out, &errb)
		if cli.Code(err) != cli.ExitUsage {
			t.Errorf("%q: exit %d, want %d", args, cli.Code(err), cli.ExitUsage)
		}
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, func(string) string { return "" }, strings.NewReader(""), &out, &errb); cli.Code(err) != 0 || !strings.Contains(errb.String(), "exit status") {
		t.Errorf("-h: %v\n%s", err, errb.String())
	}
}

func TestUnreachableBroker(t *testing.T) {
	f := writeClaim(t, t.TempDir(), "c.json", `{"guid":"x"}`)
	var out, errb bytes.Buffer
	getenv := func(k string) string { return map[string]string{"EAI_AMQP_URL": "amqp://guest:pw@127.0.0.1:1/v"}[k] }
	err := run(context.Background(), []string{f}, getenv, strings.NewReader(""), &out, &errb)
	if cli.Code(err) != cli.ExitUnavailable || strings.Contains(err.Error(), ":pw@") {
		t.Errorf("exit %d: %v", cli.Code(err), err)
	}
}
