package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
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
		got := URL(tc.raw)
		if got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.raw, got, tc.want)
		}
		for _, s := range tc.secret {
			if strings.Contains(got, s) {
				t.Errorf("URL(%q) = %q shows %q", tc.raw, got, s)
			}
		}
		if list := URL(tc.raw + "," + tc.raw); startsWithScheme(tc.raw) && list != got+","+got {
			t.Errorf("URL of a list of two %q = %q, want each redacted", tc.raw, list)
		}
	}
}

// TestPostgresURL: the same rule for the dedup store's URL, whose password
// may also be a query parameter, and whose host may be a list.
func TestPostgresURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://u:s3cret@db:5432/eaimq", "postgres://u:xxxxx@db:5432/eaimq"},
		{"postgresql://u@db/eaimq?sslmode=require", "postgresql://u@db/eaimq?sslmode=require"},
		{"postgres://db/eaimq?password=s3cret&sslmode=disable", "postgres://db/eaimq?password=xxxxx&sslmode=disable"},
		// Unparsable (a bad escape): the user name stays, the rest of the
		// userinfo goes, as for an AMQP URL.
		{"postgres://u:s3%zzret@db/eaimq", "postgres://u:xxxxx@db/eaimq"},
		{"postgres://u:s3cret@db1:5432,db2:5432/eaimq", "postgres://u:xxxxx@db1:5432,db2:5432/eaimq"},
		// A password parameter in an unparsable URL, and in an AMQP URL.
		{"postgres://db/e%zz?sslmode=disable&password=s3cret", "postgres://db/e%zz?sslmode=disable&password=xxxxx"},
		{"amqp://guest@h/x?password=s3cret", "amqp://guest@h/x?password=xxxxx"},
	} {
		if got := URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(URL(c.in), "s3cret") || strings.Contains(Scrub("failed: "+c.in, c.in), "s3cret") {
			t.Errorf("%q: the password shows", c.in)
		}
	}
}

func TestScrub(t *testing.T) {
	raw := "amqp://guest:p%40ss%2Fw0rd@h/x"
	msg := Scrub("dial "+raw+" failed; password p@ss/w0rd or p%40ss%2Fw0rd", raw)
	for _, s := range []string{"p@ss/w0rd", "p%40ss%2Fw0rd", "w0rd"} {
		if strings.Contains(msg, s) {
			t.Errorf("scrub left %q: %s", s, msg)
		}
	}
	if !strings.Contains(msg, "amqp://guest:xxxxx@h/x") {
		t.Errorf("scrub lost the redacted URL: %s", msg)
	}
}

func TestRemove(t *testing.T) {
	const amqp, db = "amqp://ops:s3cr3t-pw@10.0.0.5:5672/claims", "/var/lib/eaimq/processed.db"
	got := Remove("dial "+amqp+": refused; open "+db+": denied; "+URL(amqp), amqp, db)
	for _, secret := range []string{"s3cr3t-pw", "/var/lib/eaimq", "10.0.0.5"} {
		if strings.Contains(got, secret) {
			t.Errorf("%q shows %q", got, secret)
		}
	}
}
