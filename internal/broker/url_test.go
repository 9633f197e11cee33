package broker

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"eaimq/internal/cli"
)

// TestParseErrorsHideThePassword: whatever is wrong with the URL, the error
// names the fix, is a usage error, and shows the password in no spelling.
func TestParseErrorsHideThePassword(t *testing.T) {
	const pw = "S3ntinel-pw%zz"
	for _, tc := range []struct {
		raw, want string
	}{
		{"amqp://guest:" + pw + "@127.0.0.1:5672/x", "%25"},
		{"amqp://guest:S3ntinelpw@127.0.0.1:99999/x", "out of range"},
		{"amqp://guest:S3ntinelpw@127.0.0.1:0/x", "out of range"},
		{"amqp://guest:S3ntinelpw@127.0.0.1:abc/x", "port is not a number"},
		{"amqp://guest:S3ntinel/pw@127.0.0.1/x", `"/" as %2F`},
		{"amqp://guest:S3ntinel pw@127.0.0.1/x", "space"},
		{"http://guest:S3ntinelpw@127.0.0.1/x", "amqp://"},
		{"guest:S3ntinelpw@127.0.0.1/x", "amqp://"},
		{"amqp://guest:S3ntinelpw@127.0.0.1/x?heartbeat=abc", "heartbeat"},
		{"amqp://guest:S3ntinelpw@[::1/x", "parse"},
	} {
		_, err := VHost(tc.raw)
		if err == nil {
			t.Errorf("VHost(%q): no error", tc.raw)
			continue
		}
		if got := cli.Code(err); got != cli.ExitUsage {
			t.Errorf("VHost(%q): exit %d, want 2", tc.raw, got)
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.want) {
			t.Errorf("VHost(%q) = %q, want it to say %q", tc.raw, msg, tc.want)
		}
		for _, s := range []string{"S3ntinel", "S3ntinelpw", pw} {
			if strings.Contains(msg, s) {
				t.Errorf("VHost(%q) error shows the password: %q", tc.raw, msg)
			}
		}
		// Nothing in the chain holds the URL either: a caller that digs for
		// a *url.Error must not find one to print.
		var ue *url.Error
		if errors.As(err, &ue) {
			t.Errorf("VHost(%q) wraps a *url.Error", tc.raw)
		}
		if _, derr := Dial(tc.raw, "test", 0); derr == nil || derr.Error() != msg || cli.Code(derr) != cli.ExitUsage {
			t.Errorf("Dial(%q) = %v, want the same usage error as VHost", tc.raw, derr)
		}
	}
}

func TestVHost(t *testing.T) {
	for raw, want := range map[string]string{
		"amqp://guest:guest@127.0.0.1:5672/%2F": "/",
		"amqp://guest:guest@127.0.0.1:5672/":    "/",
		"amqp://guest:guest@127.0.0.1/a%2Fb":    "a/b",
		"amqps://u:p@localhost:5671/v%40h":      "v@h",
		"AMQP://u:p@localhost/v":                "v",
	} {
		got, err := VHost(raw)
		if err != nil || got != want {
			t.Errorf("VHost(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"eaimq-test-1": "eaimq-test-1",
		"/":            "/",
		"a b":          "'a b'",
		"it's":         `'it'\''s'`,
		"":             "''",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
