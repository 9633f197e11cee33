package broker

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"eaimq/internal/cli"
	"eaimq/internal/redact"
)

func TestAddresses(t *testing.T) {
	for raw, want := range map[string][]string{
		"amqp://g:g@h:5672/v":                            {"amqp://g:g@h:5672/v"},
		"amqp://g:g@h1:5681/v,amqp://g:g@h2:5682/v":      {"amqp://g:g@h1:5681/v", "amqp://g:g@h2:5682/v"},
		"amqp://g:g@h1/v , AMQPS://g:g@h2/v,amqp://h3/v": {"amqp://g:g@h1/v", "AMQPS://g:g@h2/v", "amqp://h3/v"},
		"amqp://g:pa,ss@h1/v":                            {"amqp://g:pa,ss@h1/v"}, // a comma in a password
		"amqp://g:pa,amqp://@h1/v":                       {"amqp://g:pa", "amqp://@h1/v"},
		"":                                               {""},
	} {
		if got := Addresses(raw); !slices.Equal(got, want) {
			t.Errorf("%q: %q, want %q", raw, got, want)
		}
	}
}

func TestListRedactAndVHost(t *testing.T) {
	raw := "amqp://g:S3cretA@h1:5681/v,amqp://g:S3cretB@h2:5682/v"
	if r := redact.URL(raw); strings.Contains(r, "S3cret") || !strings.Contains(r, "h1:5681") || !strings.Contains(r, "h2:5682") {
		t.Errorf("Redact: %s", r)
	}
	if v, err := VHost(raw); err != nil || v != "v" {
		t.Errorf("VHost: %q %v", v, err)
	}
	_, err := VHost("amqp://g:S3cretA@h1/v1,amqp://g:S3cretB@h2/v2")
	if cli.Code(err) != cli.ExitUsage || strings.Contains(err.Error(), "S3cret") || !strings.Contains(err.Error(), "different vhosts") {
		t.Errorf("two vhosts: %d %v", cli.Code(err), err)
	}
}

// TestDialListFailsOver: the first address refuses, the second is the
// real broker: Dial connects to the second. When none answers, the error
// says why for each, without a password, with their common exit code.
func TestDialListFailsOver(t *testing.T) {
	if testing.Short() { // brokertest.SkipShort's rule; brokertest imports this package
		t.Skip("skipped under -short: needs the RabbitMQ broker")
	}
	dead := "amqp://guest:S3cretA@127.0.0.1:1/%2F"
	live := "amqp://guest:guest@127.0.0.1:5672/%2F"
	conn, err := Dialer{Timeout: 5 * time.Second}.Dial(context.Background(), dead+","+live)
	if err != nil {
		t.Fatalf("a list whose second broker answers: %v (is the broker up? scripts/mq-up.sh)", err)
	}
	if !strings.HasSuffix(conn.RemoteAddr().String(), ":5672") {
		t.Errorf("connected to %s", conn.RemoteAddr())
	}
	Close(conn)
	_, err = Dialer{Timeout: 2 * time.Second}.Dial(context.Background(), dead+",amqp://guest:S3cretB@127.0.0.1:2/%2F")
	if cli.Code(err) != cli.ExitUnavailable || strings.Contains(err.Error(), "S3cret") || !strings.Contains(err.Error(), "none of the 2 brokers") {
		t.Errorf("none answers: %d %v", cli.Code(err), err)
	}
}
