package broker

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	amqp "github.com/rabbitmq/amqp091-go"
)

// tlsConfig builds the client's TLS settings for uri: TLS 1.2 or later, the
// server verified against EAI_AMQP_CA (else the system's roots) under the
// URL's host name, and a client certificate when EAI_AMQP_CERT and
// EAI_AMQP_KEY name one. A setting that cannot be used is an error (the
// caller's fail.Config).
func tlsConfig(uri amqp.URI, getenv func(string) string) (*tls.Config, error) {
	ca, cert, key := getenv(EnvCA), getenv(EnvCert), getenv(EnvKey)
	caVar, certVar, keyVar := EnvCA, EnvCert, EnvKey
	if ca == "" && uri.CACertFile != "" {
		ca, caVar = uri.CACertFile, "the URL's cacertfile"
	}
	if cert == "" && key == "" && (uri.CertFile != "" || uri.KeyFile != "") {
		cert, key, certVar, keyVar = uri.CertFile, uri.KeyFile, "the URL's certfile", "the URL's keyfile"
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: uri.Host}
	if uri.ServerName != "" {
		tc.ServerName = uri.ServerName
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("read the CA certificate (%s): %w", caVar, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s %s holds no PEM certificate", caVar, ca)
		}
		tc.RootCAs = pool
	}
	switch {
	case cert != "" && key != "":
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("load the client certificate (%s=%s, %s=%s): %w", certVar, cert, keyVar, key, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	case cert != "" || key != "":
		return nil, fmt.Errorf("a client certificate needs both %s and %s", certVar, keyVar)
	}
	return tc, nil
}
