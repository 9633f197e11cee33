package publish

import (
	"bytes"
	"os"
	"testing"
)

// TestProgressLines: on a terminal one line rewritten with \r; elsewhere,
// with always, plain lines at most one a second; auto off a terminal and
// never write nothing.
func TestProgressLines(t *testing.T) {
	for _, tc := range []struct {
		mode ProgressMode
		tty  bool
		want string
	}{
		{"always", false, "publish: 1/3 confirmed\npublish: 3/3 confirmed\n"},
		{"always", true, "\rpublish: 1/3 confirmed\rpublish: 3/3 confirmed\n"},
		{"auto", true, "\rpublish: 1/3 confirmed\rpublish: 3/3 confirmed\n"},
		{"auto", false, ""},
		{"never", true, ""},
	} {
		var b bytes.Buffer
		p := makeProgress(&b, tc.mode, 3, tc.tty)
		p.update(1)
		p.update(2) // too soon after the first, either way
		p.update(3)
		p.finish()
		if b.String() != tc.want {
			t.Errorf("%s, terminal %v: %q, want %q", tc.mode, tc.tty, b.String(), tc.want)
		}
	}
	var b bytes.Buffer
	if f, err := os.Open(os.DevNull); err == nil {
		defer f.Close()
		if isTerminal(f) {
			t.Errorf("%s is taken for a terminal", os.DevNull)
		}
	}
	if isTerminal(&b) {
		t.Error("a buffer is taken for a terminal")
	}
}
