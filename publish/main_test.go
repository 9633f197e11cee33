package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/publish"
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

// TestBadInput: every kind of bad input, alone, is refused with its exit
// code and a first stderr line naming the file (or flag) and the reason,
// and nothing at all is published.
func TestBadInput(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	dir := t.TempDir()
	claim := func(name, body string) string { return writeClaim(t, dir, name, body) }
	unreadable := claim("secret.json", `{"guid":"s"}`)
	if err := os.Chmod(unreadable, 0); err != nil {
		t.Fatal(err)
	}
	type tc struct {
		name string
		args []string
		code int
		want string // in the first stderr line, with the file's name when there is a file
	}
	cases := []tc{
		{"missing", []string{filepath.Join(dir, "nope.json")}, cli.ExitNoInput, "no such file"},
		{"directory", []string{dir}, cli.ExitNoInput, "is a directory"},
		{"empty file", []string{claim("empty.json", "")}, cli.ExitDataErr, "empty"},
		{"malformed", []string{claim("bad.json", `{"guid":`)}, cli.ExitDataErr, "malformed JSON"},
		{"two objects", []string{claim("two.json", `{"guid":"a"}{"guid":"b"}`)}, cli.ExitDataErr, "more than one value"},
		{"array", []string{claim("arr.json", `[{"guid":"a"}]`)}, cli.ExitDataErr, "JSON is an array, not an object"},
		{"no guid", []string{claim("noguid.json", `{"claimId":"C"}`)}, cli.ExitDataErr, `no "guid"`},
		{"GUID is not guid", []string{claim("upper.json", `{"GUID":"x"}`)}, cli.ExitDataErr, `no "guid"`},
		{"duplicate guid", []string{claim("dup.json", `{"guid":"a","guid":"b"}`)}, cli.ExitDataErr, `"guid": appears 2 times`},
		{"empty guid", []string{claim("emptyguid.json", `{"guid":""}`)}, cli.ExitDataErr, `"guid": empty`},
		{"number guid", []string{claim("numguid.json", `{"guid":7}`)}, cli.ExitDataErr, "a number, not a string"},
		{"256-byte guid", []string{claim("long.json", `{"guid":"`+strings.Repeat("x", 256)+`"}`)}, cli.ExitDataErr, "256 bytes long"},
		{"lone surrogate d800", []string{claim("sur1.json", `{"guid":"sur-\ud800"}`)}, cli.ExitDataErr, `lone surrogate \ud800`},
		{"lone surrogate dbff", []string{claim("sur2.json", `{"guid":"sur-\udbff"}`)}, cli.ExitDataErr, `lone surrogate \udbff`},
		{"lone low surrogate", []string{claim("sur3.json", `{"guid":"sur-\udc00"}`)}, cli.ExitDataErr, `lone surrogate \udc00`},
		{"raw 0xff", []string{claim("ff.json", "{\"guid\":\"bad-\xff\"}")}, cli.ExitDataErr, "not valid UTF-8: byte 0xFF"},
		{"raw 0xfe", []string{claim("fe.json", "{\"guid\":\"bad-\xfe\"}")}, cli.ExitDataErr, "not valid UTF-8: byte 0xFE"},
		{"newline", []string{claim("nl.json", `{"guid":"a\nb"}`)}, cli.ExitDataErr, "control character U+000A"},
		{"NUL", []string{claim("nul.json", `{"guid":"a\u0000b"}`)}, cli.ExitDataErr, "control character U+0000"},
		{"ESC", []string{claim("esc.json", `{"guid":"a\u001b[31m"}`)}, cli.ExitDataErr, "control character U+001B"},
		{"BEL", []string{claim("bel.json", `{"guid":"a\u0007"}`)}, cli.ExitDataErr, "control character U+0007"},
		{"C1", []string{claim("c1.json", `{"guid":"a\u0085b"}`)}, cli.ExitDataErr, "control character U+0085"},
		{"TAB", []string{claim("tab.json", `{"guid":"a\tb"}`)}, cli.ExitDataErr, "TAB at byte 1"},
		{"leading space", []string{claim("lead.json", `{"guid":" a"}`)}, cli.ExitDataErr, "begins with white space"},
		{"too big", []string{"-max-bytes", "1000", claim("big.json", `{"guid":"big","pad":"`+strings.Repeat("x", 2000)+`"}`)}, cli.ExitDataErr, "larger than the 1000-byte limit"},
		{"window 0", []string{"-window", "0", "x"}, cli.ExitUsage, "-window 0 is out of range: 1 to 10000"},
		{"window 1e8", []string{"-window", "100000000", "x"}, cli.ExitUsage, "-window 100000000 is out of range"},
		{"window 1e7", []string{"-window", "10000000", "x"}, cli.ExitUsage, "-window 10000000 is out of range"},
		{"max-bytes 3e9", []string{"-max-bytes", "3000000000", "/dev/zero"}, cli.ExitUsage, "-max-bytes 3000000000 is out of range: 1 to 134217728"},
		{"max-bytes 0", []string{"-max-bytes", "0", "x"}, cli.ExitUsage, "-max-bytes 0 is out of range"},
		{"timeout 0", []string{"-timeout", "0s", "x"}, cli.ExitUsage, "-timeout 0s is out of range: 100ms to 1h0m0s"},
		{"timeout 2h", []string{"-timeout", "2h", "x"}, cli.ExitUsage, "-timeout 2h0m0s is out of range"},
		{"window not a number", []string{"-window", "many", "x"}, cli.ExitUsage, `invalid value "many" for flag -window`},
		{"stdin twice", []string{"-", "-"}, cli.ExitUsage, "standard input (-) can be given once"},
		{"progress", []string{"-progress", "sometimes", "x"}, cli.ExitUsage, "-progress must be auto, always or never"},
	}
	if os.Geteuid() != 0 { // root reads a mode-0 file anyway
		cases = append(cases, tc{"unreadable", []string{unreadable}, cli.ExitNoInput, "permission denied"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runPublish(t, vh, "", tc.args...)
			first, _, _ := strings.Cut(r.stderr, "\n")
			if r.code != tc.code {
				t.Errorf("exit %d, want %d: %s", r.code, tc.code, r.stderr)
			}
			if !strings.Contains(first, tc.want) {
				t.Errorf("first stderr line %q, want one containing %q", first, tc.want)
			}
			if file := tc.args[len(tc.args)-1]; (tc.code == cli.ExitDataErr || tc.code == cli.ExitNoInput) && !strings.HasPrefix(first, "publish: "+file+": ") {
				t.Errorf("first stderr line %q does not start with publish: %s:", first, file)
			}
		})
	}
	if n := vh.Depth(t, topo.Queue); n != 0 {
		t.Errorf("bad input published %d message(s)", n)
	}
}

// TestSurrogatesAreNotOneClaim: the two claims encoding/json would merge
// into one message_id are refused together with the batch, and with
// -keep-going only the valid ones go, each under its exact guid.
func TestSurrogatesAreNotOneClaim(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	dir := t.TempDir()
	files := []string{
		writeClaim(t, dir, "ok1.json", `{"guid":"ok-\u00e9","claimId":"C-1","docs":["r.pdf"]}`),
		writeClaim(t, dir, "sur1.json", `{"guid":"sur-\ud800","claimId":"C-2","docs":["r.pdf"]}`),
		writeClaim(t, dir, "sur2.json", `{"guid":"sur-\udbff","claimId":"C-3","docs":["r.pdf"]}`),
		writeClaim(t, dir, "ff.json", "{\"guid\":\"bad-\xff\",\"claimId\":\"C-4\",\"docs\":[\"r.pdf\"]}"),
		writeClaim(t, dir, "ok2.json", `{"guid":"ok-\ud83d\ude00","claimId":"C-5","docs":["r.pdf"]}`),
	}
	r := runPublish(t, vh, "", files...)
	if r.code != cli.ExitDataErr || vh.Depth(t, topo.Queue) != 0 {
		t.Fatalf("exit %d, want %d and nothing published: %s%s", r.code, cli.ExitDataErr, r.stdout, r.stderr)
	}
	for _, f := range []string{"sur1.json", "sur2.json", "ff.json"} {
		if !strings.Contains(r.stderr, f) {
			t.Errorf("stderr does not name %s:\n%s", f, r.stderr)
		}
	}
	r = runPublish(t, vh, "", append([]string{"-keep-going"}, files...)...)
	if r.code != cli.ExitDataErr || !strings.Contains(r.stdout, "2 sent") || !strings.Contains(r.stdout, "3 invalid") {
		t.Fatalf("-keep-going: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	var ids []string
	for _, d := range vh.Drain(t, topo.Queue) {
		ids = append(ids, d.MessageId)
	}
	if want := []string{"ok-é", "ok-😀"}; strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Errorf("message_ids %q, want %q", ids, want)
	}
}

// TestMissingFile: a file that cannot be opened (a mistyped name, most
// likely) exits 66, EX_NOINPUT, and outranks one that is not a claim
// (65) in the same batch; nothing is published, and with -keep-going the
// valid claim goes and the exit is still 66, the last line saying how
// many files were missing.
func TestMissingFile(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	dir := t.TempDir()
	good := writeClaim(t, dir, "good.json", `{"guid":"good"}`)
	bad := writeClaim(t, dir, "bad.json", `not json`)
	missing := filepath.Join(dir, "mistyped.json")
	r := runPublish(t, vh, "", good, missing, bad)
	if r.code != cli.ExitNoInput || vh.Depth(t, topo.Queue) != 0 || !strings.Contains(r.stderr, "publish: "+missing+": no such file") ||
		!strings.Contains(r.stderr, "2 of 3 file(s) are not valid claims (1 missing or unreadable): nothing published") {
		t.Fatalf("exit %d, want %d, nothing published, the file named:\n%s%s", r.code, cli.ExitNoInput, r.stdout, r.stderr)
	}
	r = runPublish(t, vh, "", "-keep-going", good, missing, bad)
	if r.code != cli.ExitNoInput || !strings.Contains(r.stdout, "1 sent") || !strings.Contains(r.stdout, "2 invalid") ||
		!strings.Contains(r.stderr, "2 file(s) were not valid claims (1 missing or unreadable)") {
		t.Fatalf("-keep-going: exit %d, want %d:\n%s%s", r.code, cli.ExitNoInput, r.stdout, r.stderr)
	}
	if n := vh.Depth(t, topo.Queue); n != 1 {
		t.Errorf("claim.in holds %d, want the valid claim", n)
	}
	// Without the missing file, the same batch is a data error again.
	if r := runPublish(t, vh, "", good, bad); r.code != cli.ExitDataErr {
		t.Errorf("a malformed file alone: exit %d, want %d", r.code, cli.ExitDataErr)
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

// TestHelp: -h is the usage and the flags, -h full the manual.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "-help", "--help"} {
		for _, full := range []bool{false, true} {
			args, want := []string{arg}, cli.Help(doc, "publish")
			if full {
				args, want = append(args, "full"), cli.Manual(doc)
			}
			var out, errb bytes.Buffer
			err := run(context.Background(), args, func(string) string { return "" }, strings.NewReader(""), &out, &errb)
			if cli.Code(err) != 0 || out.String() != want || errb.Len() != 0 {
				t.Errorf("%q: exit %d, stderr %q, stdout:\n%s", args, cli.Code(err), errb.String(), out.String())
			}
		}
	}
	if h := cli.Help(doc, "publish"); !brokertest.ContainsAll(h, "Usage:", "\tpublish [flags] FILE...", "\t-keep-going ", "Exit status: 0, 2, 3, 4, 65, 66,", "publish -h full") ||
		strings.Contains(h, "lone surrogate") {
		t.Errorf("-h:\n%s", h)
	}
	if m := cli.Manual(doc); !brokertest.ContainsAll(m, "Usage:", "Exit status", "1 to 10000", "134217728", "130", "byte-exact", "lone surrogate",
		"\t-json ", "\t-version ", "\t-progress mode ", `"not_sent"`, `"failures"`) {
		t.Errorf("the manual:\n%s", m)
	}
}

// TestVersionAndTypo runs the binary: -version names the program (exit 0);
// an unknown flag is two lines on stderr and nothing on stdout (exit 2), a
// mistyped one three, the second naming the flag it most likely is.
func TestVersionAndTypo(t *testing.T) {
	bin := brokertest.Binary(t, "eaimq/publish")
	out, err := exec.Command(bin, "-version").Output()
	if err != nil || !strings.HasPrefix(string(out), "publish eaimq ") {
		t.Errorf("-version: %v: %q", err, out)
	}
	cmd := exec.Command(bin, "-bogus", "c.json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	want := "flag provided but not defined: -bogus\nrun 'publish -h' for the manual\n"
	if cmd.ProcessState.ExitCode() != 2 || stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("-bogus: %v, stderr %q, stdout %q; want exit 2 and %q", err, stderr.String(), stdout.String(), want)
	}
	cmd = exec.Command(bin, "--max-byte", "10", "c.json")
	stdout.Reset()
	stderr.Reset()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	want = "flag provided but not defined: -max-byte\ndid you mean --max-bytes?\nrun 'publish -h' for the manual\n"
	if cmd.ProcessState.ExitCode() != 2 || stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("--max-byte: %v, stderr %q, stdout %q; want exit 2 and %q", err, stderr.String(), stdout.String(), want)
	}
	// A usage mistake found after the flags: also the mistake, then the
	// pointer to the manual, once.
	cmd = exec.Command(bin)
	stderr.Reset()
	cmd.Stderr = &stderr
	cmd.Run()
	if want := "publish: no claim file given\nrun 'publish -h' for the manual\n"; cmd.ProcessState.ExitCode() != 2 || stderr.String() != want {
		t.Errorf("no file: exit %d, stderr %q; want 2, %q", cmd.ProcessState.ExitCode(), stderr.String(), want)
	}
}

// summaryLine is the whole of stdout, whatever the outcome.
var summaryLine = regexp.MustCompile(`^publish: (\d+) sent, (\d+) returned, (\d+) nacked, (\d+) invalid, (\d+) changed, (\d+) unconfirmed, (\d+) not sent \(\d[0-9.]*(ns|µs|ms|s)\)\n$`)

// TestSummaryShape: a refused batch, an all-invalid batch, a mixed
// -keep-going batch, a clean batch and a batch with no broker print the
// same line, counts in the same places; -json prints one object with the
// same counts and the claims not sent.
func TestSummaryShape(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	dir := t.TempDir()
	good1 := writeClaim(t, dir, "good1.json", `{"guid":"shape-1"}`)
	good2 := writeClaim(t, dir, "good2.json", `{"guid":"shape-2"}`)
	bad := writeClaim(t, dir, "bad.json", `not json`)
	noGuid := writeClaim(t, dir, "noguid.json", `{"claimId":"C-1"}`)
	type counts struct{ sent, invalid, notSent int }
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		want     counts
		failures []string // files, in order
	}{
		{"all invalid", []string{bad, noGuid}, cli.ExitDataErr, counts{0, 2, 0}, []string{bad, noGuid}},
		{"refused batch", []string{good1, bad}, cli.ExitDataErr, counts{0, 1, 1}, []string{good1, bad}},
		{"mixed -keep-going", []string{"-keep-going", good1, bad, good2}, cli.ExitDataErr, counts{2, 1, 0}, []string{bad}},
		{"clean", []string{good1, good2}, 0, counts{2, 0, 0}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runPublish(t, vh, "", tc.args...)
			m := summaryLine.FindStringSubmatch(r.stdout)
			if r.code != tc.code || m == nil {
				t.Fatalf("exit %d (want %d), stdout %q does not match %s\nstderr: %s", r.code, tc.code, r.stdout, summaryLine, r.stderr)
			}
			if got := (counts{atoi(t, m[1]), atoi(t, m[4]), atoi(t, m[7])}); got != tc.want {
				t.Errorf("sent, invalid, not sent = %v, want %v: %s", got, tc.want, r.stdout)
			}

			r = runPublish(t, vh, "", append([]string{"-json"}, tc.args...)...)
			var s publish.Summary
			dec := json.NewDecoder(strings.NewReader(r.stdout))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&s); err != nil || dec.More() || strings.Count(r.stdout, "\n") != 1 {
				t.Fatalf("-json: not one object on one line (%v): %q", err, r.stdout)
			}
			if r.code != tc.code || (counts{s.Sent, s.Invalid, s.NotSent}) != tc.want || s.Returned+s.Nacked+s.Changed+s.Unconfirmed != 0 || s.Seconds <= 0 {
				t.Errorf("-json: exit %d, %+v; want %d, %v", r.code, s, tc.code, tc.want)
			}
			var files []string
			for _, f := range s.Failures {
				files = append(files, f.File)
				if f.Reason == "" {
					t.Errorf("-json: failure without a reason: %+v", f)
				}
			}
			if strings.Join(files, ",") != strings.Join(tc.failures, ",") || s.Failures == nil {
				t.Errorf("-json: failures %+v, want the files %q", s.Failures, tc.failures)
			}
		})
	}
	vh.Drain(t, topo.Queue)

	// No broker: the same line, every valid claim not sent.
	var out, errb bytes.Buffer
	getenv := func(k string) string { return map[string]string{"EAI_AMQP_URL": "amqp://guest:pw@127.0.0.1:1/v"}[k] }
	err := run(context.Background(), []string{"-keep-going", good1, bad}, getenv, strings.NewReader(""), &out, &errb)
	if m := summaryLine.FindStringSubmatch(out.String()); cli.Code(err) != cli.ExitUnavailable || m == nil || m[1] != "0" || m[4] != "1" || m[7] != "1" {
		t.Errorf("no broker: exit %d, stdout %q", cli.Code(err), out.String())
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestProgressAlwaysToAPipe: -progress always with stderr a pipe (a log)
// writes plain lines, never a carriage return, and ends with the count.
func TestProgressAlwaysToAPipe(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	dir := t.TempDir()
	var files []string
	for i := range 20 {
		files = append(files, writeClaim(t, dir, fmt.Sprintf("p%02d.json", i), fmt.Sprintf(`{"guid":"progress-%02d"}`, i)))
	}
	cmd := exec.Command(brokertest.Binary(t, "eaimq/publish"), append([]string{"-progress", "always"}, files...)...)
	cmd.Env = append(os.Environ(), "EAI_AMQP_URL="+vh.URL)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s%s", err, stdout.String(), stderr.String())
	}
	if strings.Contains(stderr.String(), "\r") || !strings.HasSuffix(stderr.String(), "publish: 20/20 confirmed\n") {
		t.Errorf("stderr %q: want plain lines ending with the count", stderr.String())
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
