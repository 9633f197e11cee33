package fail

import (
	"errors"
	"fmt"
	"testing"
)

func TestNewKeepsTheMoreSpecificClass(t *testing.T) {
	base := errors.New("x")
	missing := errors.New("missing")
	for _, tc := range []struct {
		name string
		err  error
		want Class
	}{
		{"plain error takes the class", New(Unavailable, base), Unavailable},
		{"an *Error keeps its class", New(Unavailable, New(NoPerm, base)), NoPerm},
		{"a wrapped *Error keeps its class", New(Unavailable, fmt.Errorf("connect: %w", New(Config, base))), Config},
		{"Errorf with %w keeps it too", Errorf(Unavailable, "connect: %w", New(Usage, base)), Usage},
		{"Errorf with %v does not wrap", Errorf(Unavailable, "connect: %v", New(Usage, base)), Unavailable},
		{"Broker keeps it", Broker(New(NoPerm, base), missing), NoPerm},
		{"Broker: missing topology is Config", Broker(fmt.Errorf("declare: %w", missing), missing), Config},
		{"Broker: anything else is Unavailable", Broker(base, missing), Unavailable},
		{"nil stays nil", New(Unavailable, nil), None},
		{"no class", base, None},
	} {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("%s: class %v, want %v", tc.name, got, tc.want)
		}
	}
	if New(Unavailable, nil) != nil || Broker(nil, missing) != nil {
		t.Error("a nil error is not nil")
	}
	if e := New(IO, base); e.Error() != "x" || !errors.Is(e, base) {
		t.Error("the class changes the message or hides the cause")
	}
}
