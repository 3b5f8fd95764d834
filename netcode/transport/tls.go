package transport

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// WithALPN returns a copy of cfg that negotiates only TLS 1.3 (QUIC requires
// it) and offers exactly the given ALPN protocols. Endpoint applies it to
// both of its TLS configs with Config.ALPN; call it directly when handing a
// config to quic-go yourself.
func WithALPN(cfg *tls.Config, alpn ...string) *tls.Config {
	c := cfg.Clone()
	c.MinVersion = tls.VersionTLS13
	c.MaxVersion = tls.VersionTLS13
	c.NextProtos = append([]string(nil), alpn...)
	return c
}

// ServerTLS returns a server config with the certificate chain in certFile
// and its private key in keyFile (both PEM), for production certificates.
// The ALPN list is set by Endpoint (or WithALPN).
func ServerTLS(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("transport: load server certificate %s / %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// ClientTLS returns a client config that trusts only the CA certificates in
// caFile (PEM), or the system roots when caFile is empty. The server name to
// verify comes from the address given to Endpoint.Dial.
func ClientTLS(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13}
	if caFile == "" {
		return cfg, nil
	}
	pool, err := LoadCertPool(caFile)
	if err != nil {
		return nil, err
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// LoadCertPool reads one or more PEM certificates from file into a pool.
func LoadCertPool(file string) (*x509.CertPool, error) {
	pemBytes, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("transport: read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("transport: CA file %s: no PEM certificate found", file)
	}
	return pool, nil
}

// RequireClientCerts returns a copy of server that demands a client
// certificate chaining to clientCAs and rejects the handshake otherwise:
// mutual TLS for node-to-node links. The verified chain is available from
// Conn.TLS().
func RequireClientCerts(server *tls.Config, clientCAs *x509.CertPool) *tls.Config {
	c := server.Clone()
	c.ClientAuth = tls.RequireAndVerifyClientCert
	c.ClientCAs = clientCAs
	return c
}

// WithClientCert returns a copy of client that presents cert when the server
// asks for a client certificate (see RequireClientCerts).
func WithClientCert(client *tls.Config, cert tls.Certificate) *tls.Config {
	c := client.Clone()
	c.Certificates = []tls.Certificate{cert}
	return c
}
