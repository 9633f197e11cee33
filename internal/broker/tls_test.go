package broker_test

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
)

// tlsPeer is a Go TLS listener on loopback standing in for a broker's TLS
// port: it completes the handshake, reports the client's certificate
// count, and hangs up (so the AMQP handshake that follows fails with 69).
func tlsPeer(t *testing.T, cfg *tls.Config) (port string, peerCerts <-chan int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	certs := make(chan int, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := tls.Server(c, cfg)
				tc.SetDeadline(time.Now().Add(5 * time.Second))
				if tc.Handshake() == nil {
					// In TLS 1.3 the server checks the client's certificate
					// after the client considers the handshake done; a read
					// makes a refusal reach the client as an alert.
					tc.Read(make([]byte, 1))
					certs <- len(tc.ConnectionState().PeerCertificates)
				}
			}()
		}
	}()
	_, port, _ = net.SplitHostPort(l.Addr().String())
	return port, certs
}

func TestTLSVerification(t *testing.T) {
	pki := brokertest.NewPKI(t, t.TempDir(), "localhost")
	plainPort, _ := tlsPeer(t, pki.ServerConfig(false))
	mtlsPort, certs := tlsPeer(t, pki.ServerConfig(true))
	withCA := map[string]string{broker.EnvCA: pki.CA}
	withPair := map[string]string{broker.EnvCA: pki.CA, broker.EnvCert: pki.ClientCert, broker.EnvKey: pki.ClientKey}
	for _, tc := range []struct {
		name, url string
		env       map[string]string
		code      int
		says      []string
	}{
		{"trusted, right name", "amqps://guest:guest@localhost:" + plainPort + "/x", withCA,
			cli.ExitUnavailable, []string{"hung up during the handshake"}},
		{"system roots", "amqps://guest:guest@localhost:" + plainPort + "/x", nil,
			cli.ExitConfig, []string{"not trust", "eaimq test CA", "set EAI_AMQP_CA"}},
		{"name not in the certificate", "amqps://guest:guest@127.0.0.1:" + plainPort + "/x", withCA,
			cli.ExitConfig, []string{"connect to amqps://guest:xxxxx@127.0.0.1:", `not valid for "127.0.0.1"`, `only for "localhost"`}},
		{"URL's cacertfile", "amqps://guest:guest@localhost:" + plainPort + "/x?cacertfile=" + pki.CA, nil,
			cli.ExitUnavailable, []string{"hung up during the handshake"}},
		{"client certificate missing", "amqps://guest:guest@localhost:" + mtlsPort + "/x", withCA,
			cli.ExitConfig, []string{"set EAI_AMQP_CERT and EAI_AMQP_KEY"}},
		{"client certificate sent", "amqps://guest:guest@localhost:" + mtlsPort + "/x", withPair,
			cli.ExitUnavailable, []string{"hung up during the handshake"}},
		{"CA file not PEM", "amqps://guest:guest@localhost:" + plainPort + "/x", map[string]string{broker.EnvCA: pki.ClientKey},
			cli.ExitConfig, []string{"EAI_AMQP_CA", "no PEM certificate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := broker.Dialer{Program: "test", Timeout: 5 * time.Second, Getenv: func(k string) string { return tc.env[k] }}
			conn, err := d.Dial(context.Background(), tc.url)
			if err == nil {
				conn.Close()
				t.Fatal("connected to a peer that speaks no AMQP")
			}
			if cli.Code(err) != tc.code || !brokertest.ContainsAll(err.Error(), tc.says...) {
				t.Errorf("exit %d, want %d saying %q:\n%v", cli.Code(err), tc.code, tc.says, err)
			}
		})
	}
	select {
	case n := <-certs:
		if n != 1 {
			t.Errorf("the mTLS peer saw %d client certificates, want 1", n)
		}
	case <-time.After(5 * time.Second):
		t.Error("no handshake with a client certificate completed")
	}
}
