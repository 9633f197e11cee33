package broker_test

import (
	"context"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
)

// TestDialFailures: each way a connection fails ends in its own exit code
// and names its fix, and none shows the password.
func TestDialFailures(t *testing.T) {
	vh := brokertest.New(t)
	u, _ := url.Parse(vh.URL)
	host := u.Host
	closed := closedPort(t)
	const pw = "S3ntinelpw"
	for _, tc := range []struct {
		name, raw string
		env       map[string]string
		code      int
		fix       string
	}{
		{"wrong password", "amqp://guest:" + pw + "@" + host + u.RawPath, nil, cli.ExitNoPerm, "check the user and password"},
		{"unknown vhost", "amqp://guest:guest@" + host + "/no-such-vhost-" + pw[:3], nil, cli.ExitConfig, "rabbitmqctl add_vhost no-such-vhost-S3n"},
		{"refused", "amqp://guest:" + pw + "@" + closed + "/x", nil, cli.ExitUnavailable, "is the broker up? (scripts/mq-up.sh starts one)"},
		{"TLS on the plain port", "amqps://guest:" + pw + "@" + host + "/x", nil, cli.ExitUnavailable, "this port does not speak TLS"},
		{"unreadable CA", "amqps://guest:" + pw + "@" + host + "/x", map[string]string{broker.EnvCA: filepath.Join(t.TempDir(), "nope.pem")}, cli.ExitConfig, broker.EnvCA},
		{"half a client pair", "amqps://guest:" + pw + "@" + host + "/x", map[string]string{broker.EnvCert: "/etc/hostname"}, cli.ExitConfig, broker.EnvKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := broker.Dialer{Program: "test", Timeout: 5 * time.Second, Getenv: func(k string) string { return tc.env[k] }}
			conn, err := d.Dial(context.Background(), tc.raw)
			if err == nil {
				conn.Close()
				t.Fatal("connected")
			}
			if got := cli.Code(err); got != tc.code {
				t.Errorf("exit %d, want %d: %v", got, tc.code, err)
			}
			if !strings.Contains(err.Error(), tc.fix) {
				t.Errorf("error does not say %q: %v", tc.fix, err)
			}
			if strings.Contains(err.Error(), pw) {
				t.Errorf("error shows the password: %v", err)
			}
			// A caller's general code does not flatten the specific one.
			if got := cli.Code(cli.Exit(cli.ExitUnavailable, err)); got != tc.code {
				t.Errorf("cli.Exit(69, err) is %d, want %d", got, tc.code)
			}
		})
	}
}

// TestDialContextCancelled: a peer that accepts and never answers holds the
// AMQP handshake until the timeout; ending the context ends it at once.
func TestDialContextCancelled(t *testing.T) {
	addr := silentListener(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := broker.DialContext(ctx, "amqp://guest:guest@"+addr+"/x", "test", 30*time.Second)
	if took := time.Since(start); took > time.Second {
		t.Errorf("DialContext returned %s after it started, 200ms after its context ended", took)
	}
	if cli.Code(err) != cli.ExitInterrupted || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("err = %v (exit %d), want an interruption (exit %d)", err, cli.Code(err), cli.ExitInterrupted)
	}
}

// TestDialContextDeadline: a ctx deadline is the caller's time running
// out, not an interruption: 69, like the timeout, and still prompt.
func TestDialContextDeadline(t *testing.T) {
	addr := silentListener(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := broker.DialContext(ctx, "amqp://guest:guest@"+addr+"/x", "test", 30*time.Second)
	if took := time.Since(start); took > time.Second {
		t.Errorf("DialContext returned %s after it started, with a 200ms deadline", took)
	}
	if cli.Code(err) != cli.ExitUnavailable || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("err = %v (exit %d), want 69 naming the deadline", err, cli.Code(err))
	}
}

// TestDialTimeout: the same silent peer without a cancel: the timeout
// bounds the handshake and the error says so.
func TestDialTimeout(t *testing.T) {
	addr := silentListener(t)
	start := time.Now()
	_, err := broker.Dial("amqp://guest:guest@"+addr+"/x", "test", 300*time.Millisecond)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Dial took %s with a 300ms timeout", took)
	}
	if cli.Code(err) != cli.ExitUnavailable || !strings.Contains(err.Error(), "is the broker up?") {
		t.Errorf("err = %v (exit %d), want 69 naming the fix", err, cli.Code(err))
	}
}

// silentListener accepts connections on loopback and never writes a byte.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// closedPort returns a loopback address nobody listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
