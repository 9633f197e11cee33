package brokertest

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"eaimq/internal/cli"
)

// UsageCase is one command line and what the program must print for it:
// the exit code, a prefix of stdout ("" means nothing at all), and all of
// stderr, exactly. (An alias of a plain struct, so that tables of cases can
// be written one line each without field names.)
type UsageCase = struct {
	Args           []string
	Code           int
	Stdout, Stderr string
}

// CheckUsage runs each case through run (a program's run, given args and
// its output streams), reports the error as main does, and checks the exit
// code, stdout and stderr. When a case's Stdout is manual, stdout must be
// exactly the manual.
func CheckUsage(t *testing.T, program, manual string, cases []UsageCase, run func(args []string, stdout, stderr io.Writer) error) {
	t.Helper()
	for _, tc := range cases {
		var out, errb bytes.Buffer
		err := run(tc.Args, &out, &errb)
		cli.Report(&errb, program, err) // as main does
		if cli.Code(err) != tc.Code || !strings.HasPrefix(out.String(), tc.Stdout) || (tc.Stdout == "") != (out.Len() == 0) || errb.String() != tc.Stderr {
			t.Errorf("%q: exit %d, stdout %.80q, stderr %q; want %d, %.80q, %q", tc.Args, cli.Code(err), out.String(), errb.String(), tc.Code, tc.Stdout, tc.Stderr)
		}
		if tc.Stdout == manual && out.String() != manual {
			t.Errorf("%q: stdout is not exactly the manual", tc.Args)
		}
	}
}
