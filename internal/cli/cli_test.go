package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
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
