package broker

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"eaimq/internal/cli"
)

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
		secret    []string // must not appear in the output
	}{
		{"amqp://guest:S3cret@127.0.0.1:5672/x", "amqp://guest:xxxxx@127.0.0.1:5672/x", []string{"S3cret"}},
		{"amqp://guest:guest@127.0.0.1:5672/%2F", "amqp://guest:xxxxx@127.0.0.1:5672/%2F", nil},
		{"amqp://guest@127.0.0.1/x", "amqp://guest@127.0.0.1/x", nil},
		{"amqp://127.0.0.1:5672/x", "amqp://127.0.0.1:5672/x", nil},
		// Parses; only the dial finds the port out of range.
		{"amqp://guest:S3cret@127.0.0.1:99999/x", "amqp://guest:xxxxx@127.0.0.1:99999/x", []string{"S3cret"}},
		// A bad escape: url.Parse fails and its error would quote the URL.
		{"amqp://guest:S3ntinel-pw%zz@127.0.0.1:5672/x", "amqp://guest:xxxxx@127.0.0.1:5672/x", []string{"S3ntinel", "%zz"}},
		// A percent-encoded password: neither spelling survives.
		{"amqp://guest:p%40ss%2Fw0rd@h/x", "amqp://guest:xxxxx@h/x", []string{"p%40ss", "p@ss/w0rd"}},
		// An unencoded "/" in the password: a parser sees host "guest",
		// port "12", and the password in the path.
		{"amqp://guest:12/s3cret@127.0.0.1/x", "amqp://guest:xxxxx@127.0.0.1/x", []string{"s3cret", "12/"}},
		{"amqp://guest:pa/ss@127.0.0.1/x", "amqp://guest:xxxxx@127.0.0.1/x", []string{"pa/ss"}},
		// "@" and "#" unencoded in the password.
		{"amqp://guest:p@ss@127.0.0.1/x", "amqp://guest:xxxxx@127.0.0.1/x", []string{"p@ss"}},
		{"amqp://guest:p#ss@127.0.0.1/x", "amqp://guest:xxxxx@127.0.0.1/x", []string{"p#ss"}},
		{"amqp://guest:p?ss@127.0.0.1/x", "amqp://guest:xxxxx@127.0.0.1/x", []string{"p?ss"}},
		// A bad port that does not parse.
		{"amqp://guest:S3cret@127.0.0.1:abc/x", "amqp://guest:xxxxx@127.0.0.1:abc/x", []string{"S3cret"}},
		// No scheme at all: url.Parse takes "guest" for one.
		{"guest:S3cret@127.0.0.1:5672/x", "guest:xxxxx@127.0.0.1:5672/x", []string{"S3cret"}},
		// The host forgotten: "user:password" where host:port would be.
		{"amqp://guest:S3cret%zz", "amqp://xxxxx", []string{"S3cret"}},
		{"amqp://guest:S3cret/x", "amqp://xxxxx/x", []string{"S3cret"}},
		// A user name that is not plainly a name is hidden too.
		{"amqp://gu%zz:S3cret@h/x", "amqp://xxxxx@h/x", []string{"S3cret", "gu%zz"}},
		// http(s), for the consumer's --claim URL.
		{"http://claims:T0ken@127.0.0.1:9202/v1", "http://claims:xxxxx@127.0.0.1:9202/v1", []string{"T0ken"}},
		{"https://claims:T0k%zzen@partner.example/v1", "https://claims:xxxxx@partner.example/v1", []string{"T0k"}},
		{"http://127.0.0.1:9202", "http://127.0.0.1:9202", nil},
		{"", "", nil},
		{"://", "://", nil},
		{"@", "@", nil},
	} {
		got := RedactURL(tc.raw)
		if got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.raw, got, tc.want)
		}
		for _, s := range tc.secret {
			if strings.Contains(got, s) {
				t.Errorf("RedactURL(%q) = %q shows %q", tc.raw, got, s)
			}
		}
		if Redact(tc.raw) != got {
			t.Errorf("Redact(%q) and RedactURL differ", tc.raw)
		}
	}
}

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

func TestScrub(t *testing.T) {
	raw := "amqp://guest:p%40ss%2Fw0rd@h/x"
	msg := scrub("dial "+raw+" failed; password p@ss/w0rd or p%40ss%2Fw0rd", raw)
	for _, s := range []string{"p@ss/w0rd", "p%40ss%2Fw0rd", "w0rd"} {
		if strings.Contains(msg, s) {
			t.Errorf("scrub left %q: %s", s, msg)
		}
	}
	if !strings.Contains(msg, "amqp://guest:xxxxx@h/x") {
		t.Errorf("scrub lost the redacted URL: %s", msg)
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
