package cli

import (
	"errors"
	"fmt"
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
