// Package clitest holds what the programs' tests of their flag parsing
// share: one row of a parseConfig table, checked the same way everywhere.
package clitest

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"

	"eaimq/internal/cli"
)

// CheckConfig checks one row of a program's parseConfig table. parse runs
// the program's parseConfig with the row's arguments and environment,
// writing to stdout and stderr. With code 0 the config must be want and
// nothing printed; with a code, the error must have that exit code and
// start with msg; for -h and -version (flag.ErrHelp) stdout must start
// with msg and stderr stay empty.
func CheckConfig[C any](t *testing.T, parse func(stdout, stderr io.Writer) (C, error), want C, code int, msg string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	got, err := parse(&stdout, &stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		if !strings.HasPrefix(stdout.String(), msg) || msg == "" || stderr.Len() != 0 {
			t.Errorf("stdout %q, stderr %q; want stdout to start %q", stdout.String(), stderr.String(), msg)
		}
	case code != 0:
		if cli.Code(err) != code || !strings.HasPrefix(err.Error()+"\n", msg) {
			t.Errorf("error %v (exit %d), want exit %d: %q", err, cli.Code(err), code, msg)
		}
	case err != nil:
		t.Errorf("error %v, want %+v", err, want)
	case !reflect.DeepEqual(got, want):
		t.Errorf("config %+v, want %+v", got, want)
	}
	if err == nil && stdout.Len()+stderr.Len() != 0 {
		t.Errorf("printed %q %q for a good config", stdout.String(), stderr.String())
	}
}
