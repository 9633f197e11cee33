package trace

import "testing"

func TestParse(t *testing.T) {
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{valid, true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", true}, // a later version may add fields
		{valid + "-extra", false}, // version 00 has exactly four
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", false},
		{"", false},
	} {
		id, ok := Parse(tc.in)
		if ok != tc.ok || (ok && id != tc.in[3:35]) {
			t.Errorf("Parse(%q) = %q, %v; want ok=%v", tc.in, id, ok, tc.ok)
		}
	}
	if _, err := Headers("nonsense"); err == nil {
		t.Error("Headers accepted an invalid traceparent")
	}
	if h, err := Headers(valid); err != nil || h[Header] != valid {
		t.Errorf("Headers = %v, %v", h, err)
	}
}
