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
		{[]string{"-nn", "3"}, 2, "", "flag provided but not defined: -nn\ndid you mean -n?\nrun 'prog -h' for the manual\n"},
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
		lines := 2 // what is wrong, where the manual is
		if strings.Contains(errb.String(), "did you mean") {
			lines = 3
		}
		if tc.code == 2 && strings.Count(errb.String(), "\n") != lines {
			t.Errorf("%q: a mistake should print %d lines, not:\n%s", tc.args, lines, errb.String())
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

// helpDoc is a manual shaped as the programs' are: a first paragraph,
// Usage, prose, Flags, Environment, more prose, Exit status.
const helpDoc = `// Prog does a thing
// in two lines.
//
// Usage:
//
//	prog [-n N] FILE
//	prog -h | -version
//
// Long prose that -h leaves out.
//
// Flags (-flag and --flag are the same):
//
//	-n N        a number
//	            (default 0)
//
//	-verbose    say more
//
// Environment:
//
//	PROG_URL    where
//	            PEM, on a row of its own: no name
//	VISUAL, EDITOR edit: the editor
//
// Exit status (the first that applies):
//
//	0    done
//	78   configuration
//	2    usage
package main
`

// TestHelp: -h is the first paragraph, the Usage and Flags blocks as the
// manual has them, the environment's names, the exit codes in order, and
// how to read the rest; -h full is the whole manual; a manual without a
// Usage or Flags block is printed whole by -h too.
func TestHelp(t *testing.T) {
	want := `Prog does a thing
in two lines.

Usage:

	prog [-n N] FILE
	prog -h | -version

Flags (-flag and --flag are the same):

	-n N        a number
	            (default 0)

	-verbose    say more

Environment: PROG_URL, VISUAL, EDITOR
Exit status: 0, 2, 78

That is the front of the manual. 'prog -h full | less' reads all of it: what
the program does and why, and what each exit status means.
`
	if got := Help(helpDoc, "prog"); got != want {
		t.Errorf("Help:\n%s\nwant:\n%s", got, want)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-h"}, want},
		{[]string{"--help", "FILE"}, want},
		{[]string{"-n", "3", "-h", "full"}, Manual(helpDoc)},
		{[]string{"-help", "full", "more"}, Manual(helpDoc)},
	} {
		fs := flag.NewFlagSet("prog", flag.ContinueOnError)
		var out, errb bytes.Buffer
		fs.SetOutput(&errb)
		fs.Int("n", 0, "")
		if err := Flags(fs, helpDoc, tc.args, &out); Code(err) != 0 || out.String() != tc.want || errb.Len() != 0 {
			t.Errorf("%q: exit %d, stderr %q, stdout:\n%s", tc.args, Code(err), errb.String(), out.String())
		}
	}
	const bare = "// Prog does a thing.\n//\n//\tprog [-n N]\npackage main\n"
	if Help(bare, "prog") != Manual(bare) {
		t.Errorf("a manual without Usage and Flags: Help is not the manual")
	}
}

// TestSuggest: an unknown flag one slip away from a known one gets it
// suggested, with the dashes typed; nothing when no flag is near, or for
// another mistake.
func TestSuggest(t *testing.T) {
	fs := flag.NewFlagSet("prog", flag.ContinueOnError)
	for _, name := range []string{"max-seconds", "prefetch", "json", "retain", "retry-delays", "n"} {
		fs.Bool(name, false, "")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-second", "10"}, "did you mean --max-seconds?"},
		{[]string{"-max-secnods=10"}, "did you mean -max-seconds?"}, // two letters swapped, and a value
		{[]string{"--prefecth"}, "did you mean --prefetch?"},
		{[]string{"-jsno"}, "did you mean -json?"},
		{[]string{"-JSON"}, ""}, // four letters changed
		{[]string{"--retian"}, "did you mean --retain?"},
		{[]string{"--retry-delay", "1s"}, "did you mean --retry-delays?"},
		{[]string{"-m"}, "did you mean -n?"},
		{[]string{"-bogus"}, ""},
		{[]string{"--max"}, ""},
		{[]string{"x", "--max-second"}, ""}, // not a flag: after the first argument
	} {
		var errb bytes.Buffer
		fs.SetOutput(&errb)
		err := fs.Parse(tc.args)
		if err == nil {
			if tc.want != "" {
				t.Errorf("%q: parsed", tc.args)
			}
			continue
		}
		if got := Suggest(fs, tc.args, err); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.args, got, tc.want)
		}
	}
	if got := Suggest(fs, nil, errors.New(`invalid value "x" for flag -n`)); got != "" {
		t.Errorf("another error got a suggestion: %q", got)
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "ab", 2}, {"json", "json", 0},
		{"max-second", "max-seconds", 1}, {"retian", "retain", 1}, {"prefecth", "prefetch", 1},
		{"kitten", "sitting", 3}, {"ca", "abc", 3}, // optimal string alignment, not full Damerau (2)
	} {
		if got := distance(tc.a, tc.b); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := distance(tc.b, tc.a); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d (not symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}
