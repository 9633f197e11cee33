package cli

import (
	"bytes"
	"eaimq/internal/fail"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestExitKeepsTheMoreSpecificCode(t *testing.T) {
	base := errors.New("x")
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"plain error takes the code", Exit(ExitUnavailable, base), ExitUnavailable},
		{"an *Error keeps its code", Exit(ExitUnavailable, Exit(ExitNoPerm, base)), ExitNoPerm},
		{"a wrapped *Error keeps its code", Exit(ExitUnavailable, fmt.Errorf("connect: %w", Exit(ExitConfig, base))), ExitConfig},
		{"Exitf with %w keeps it too", Exitf(ExitUnavailable, "connect: %w", Exit(ExitUsage, base)), ExitUsage},
		{"Exitf with %v does not wrap", Exitf(ExitUnavailable, "connect: %v", Exit(ExitUsage, base)), ExitUnavailable},
		{"Broker keeps it", Broker(Exit(ExitNoPerm, base), errors.New("missing")), ExitNoPerm},
		{"nil stays nil", Exit(ExitUnavailable, nil), ExitOK},
	} {
		if got := Code(tc.err); got != tc.want {
			t.Errorf("%s: code %d, want %d", tc.name, got, tc.want)
		}
	}
	if Exit(ExitUnavailable, nil) != nil {
		t.Error("Exit(code, nil) is not nil")
	}
}

func TestFlags(t *testing.T) {
	const doc = "// Prog does a thing.\n//\n//\tprog [-n N]\npackage main\n"
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"-h"}, 0, "Prog does a thing.\n\n\tprog [-n N]\n", ""},
		{[]string{"--help"}, 0, "Prog does a thing.", ""},
		{[]string{"-version"}, 0, "prog eaimq", ""},
		{[]string{"--version"}, 0, "prog ", ""},
		{[]string{"-bogus"}, 2, "", "flag provided but not defined: -bogus\nrun 'prog -h' for the manual\n"},
		{[]string{"-n", "x"}, 2, "", "run 'prog -h' for the manual"},
		{[]string{"-n", "3"}, 0, "", ""},
	} {
		fs := flag.NewFlagSet("prog", flag.ContinueOnError)
		var out, errb bytes.Buffer
		fs.SetOutput(&errb)
		fs.Int("n", 0, "a number")
		err := Flags(fs, doc, tc.args, &out)
		Report(&errb, "prog", err)
		if Code(err) != tc.code || !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errb.String(), tc.stderr) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", tc.args, Code(err), out.String(), errb.String())
		}
		if tc.code == 2 && strings.Count(errb.String(), "\n") != 2 {
			t.Errorf("%q: a mistake should print two lines, not:\n%s", tc.args, errb.String())
		}
	}
}

// TestClassCodes: each class of failure has the exit code the manuals
// document, and an explicit code of a program's own wins.
func TestClassCodes(t *testing.T) {
	base := errors.New("x")
	for c, want := range map[fail.Class]int{
		fail.Failed: 1, fail.Usage: 2, fail.Data: 65, fail.Unavailable: 69, fail.Internal: 70, fail.IO: 74,
		fail.TempFail: 75, fail.NoPerm: 77, fail.Config: 78, fail.Interrupted: 130, fail.NoInput: 66,
	} {
		if got := Code(fail.New(c, base)); got != want {
			t.Errorf("%v: exit %d, want %d", c, got, want)
		}
	}
	if Code(base) != ExitFailure || Code(Usagef("x")) != ExitUsage || Code(Exit(3, base)) != 3 {
		t.Error("a plain error, a usage error or an explicit code maps wrong")
	}
	if Code(Exit(3, fail.New(fail.IO, base))) != ExitIOErr {
		t.Error("an explicit code overrides the class chosen below it")
	}
}

// TestReportLogIsAllJSON: how a run ended, flag errors included, comes out
// as JSON records with the exit status, no plain line among them.
func TestReportLogIsAllJSON(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&b, nil))
	err := ReportLog(log, "consumer", "flag provided but not defined: -x\n", Usagef("bad flag"))
	if Code(err) != ExitUsage {
		t.Fatalf("code %d, want %d", Code(err), ExitUsage)
	}
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		var rec struct {
			Msg    string `json:"msg"`
			Status int    `json:"exit_status"`
		}
		if e := json.Unmarshal([]byte(line), &rec); e != nil {
			t.Fatalf("not JSON: %q", line)
		}
		if rec.Status != ExitUsage {
			t.Errorf("%q: exit_status %d", line, rec.Status)
		}
		msgs = append(msgs, rec.Msg)
	}
	if len(msgs) < 2 || !strings.Contains(msgs[0], "not defined") || !strings.Contains(msgs[1], "consumer: bad flag") {
		t.Fatalf("records %q", msgs)
	}
	b.Reset()
	ReportLog(log, "consumer", "", err) // shown already: nothing more
	if b.Len() != 0 {
		t.Fatalf("an error shown already was reported again: %s", b.String())
	}
}
