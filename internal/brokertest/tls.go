package brokertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a throwaway certificate authority and two certificates it signed,
// as PEM files in Dir: one for a server, valid for exactly the names given
// to NewPKI, and one for a client.
type PKI struct {
	Dir                    string
	CA                     string // the CA's certificate
	ServerCert, ServerKey  string
	ClientCert, ClientKey  string
	caCert                 *x509.Certificate
	caKey                  *ecdsa.PrivateKey
	serverPair, clientPair tls.Certificate
}

// NewPKI writes a CA, a server certificate for serverNames (host names or
// IP addresses; nothing else) and a client certificate into dir, each
// readable by all, so that a broker running as another user can read them.
func NewPKI(t testing.TB, dir string, serverNames ...string) *PKI {
	t.Helper()
	p := &PKI{Dir: dir}
	var err error
	p.caKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "eaimq test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, ca, ca, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if p.caCert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	p.CA = p.write(t, "ca.pem", "CERTIFICATE", der)

	server := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "eaimq test server"},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range serverNames {
		if ip := net.ParseIP(n); ip != nil {
			server.IPAddresses = append(server.IPAddresses, ip)
		} else {
			server.DNSNames = append(server.DNSNames, n)
		}
	}
	p.ServerCert, p.ServerKey, p.serverPair = p.issue(t, "server", server)
	client := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "eaimq test client"},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	p.ClientCert, p.ClientKey, p.clientPair = p.issue(t, "client", client)
	return p
}

// issue signs tmpl with the CA and writes NAME.pem and NAME.key.
func (p *PKI) issue(t testing.TB, name string, tmpl *x509.Certificate) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = p.write(t, name+".pem", "CERTIFICATE", der)
	keyFile = p.write(t, name+".key", "EC PRIVATE KEY", kder)
	pair, err = tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pair
}

func (p *PKI) write(t testing.TB, name, kind string, der []byte) string {
	t.Helper()
	f := filepath.Join(p.Dir, name)
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// ServerConfig is a TLS server configuration with the server certificate,
// for a Go listener standing in for a TLS broker; with clientAuth, it asks
// for a client certificate signed by the CA and refuses a connection
// without one.
func (p *PKI) ServerConfig(clientAuth bool) *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{p.serverPair}, MinVersion: tls.VersionTLS12}
	if clientAuth {
		pool := x509.NewCertPool()
		pool.AddCert(p.caCert)
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c
}
