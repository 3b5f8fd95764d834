package transport

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// File names of a DevCA persisted in a directory.
const (
	DevCACertFile = "ca.pem"
	DevCAKeyFile  = "ca-key.pem"
)

// Validity of development certificates. Leaves are cheap to reissue at every
// start; the CA lives long so a persisted one keeps working.
const (
	devCAValidity   = 10 * 365 * 24 * time.Hour
	devLeafValidity = 365 * 24 * time.Hour
	devClockSkew    = time.Hour
)

// DevCA is a self-signed ed25519 certificate authority for development,
// tests and single-operator clusters. Every node of a cluster loads the same
// persisted CA, issues itself a leaf certificate, and trusts the CA for its
// peers, so nodes can authenticate each other (mutual TLS) without any
// external PKI. For production certificates use ServerTLS and ClientTLS.
type DevCA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     ed25519.PrivateKey
}

// NewDevCA generates a fresh CA in memory; Save persists it.
func NewDevCA() (*DevCA, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("transport: dev CA: generate key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Broadside development CA", Organization: []string{"Broadside"}},
		NotBefore:             now.Add(-devClockSkew),
		NotAfter:              now.Add(devCAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, fmt.Errorf("transport: dev CA: create certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("transport: dev CA: parse certificate: %w", err)
	}
	return &DevCA{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:     key,
	}, nil
}

// LoadDevCA reads a CA saved in dir (ca.pem and ca-key.pem) and checks that
// the key belongs to the certificate. A missing file yields an error matching
// fs.ErrNotExist.
func LoadDevCA(dir string) (*DevCA, error) {
	certPath, keyPath := filepath.Join(dir, DevCACertFile), filepath.Join(dir, DevCAKeyFile)
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("transport: load dev CA: %w", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("transport: load dev CA: %w", err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("transport: load dev CA: %s: no PEM certificate", certPath)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("transport: load dev CA: %s: %w", certPath, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("transport: load dev CA: %s is not a CA certificate", certPath)
	}
	block, _ = pem.Decode(keyPEM)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("transport: load dev CA: %s: no PEM private key", keyPath)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("transport: load dev CA: %s: %w", keyPath, err)
	}
	key, ok := parsed.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("transport: load dev CA: %s: key is %T, want ed25519", keyPath, parsed)
	}
	certPub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok || !certPub.Equal(key.Public()) {
		return nil, fmt.Errorf("transport: load dev CA: key in %s does not match %s", keyPath, certPath)
	}
	return &DevCA{cert: cert, certPEM: certPEM, key: key}, nil
}

// LoadOrCreateDevCA loads the CA saved in dir, or creates and saves a new one
// if there is none. Several processes may call it at once on the same
// directory: one creates, the others load its CA.
func LoadOrCreateDevCA(dir string) (*DevCA, error) {
	ca, err := LoadDevCA(dir)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return ca, err
	}
	ca, err = NewDevCA()
	if err != nil {
		return nil, err
	}
	err = ca.Save(dir)
	if err == nil {
		return ca, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	// Another process is saving its CA; wait (boundedly) for it to finish.
	const attempts = 100
	for range attempts {
		if ca, err = LoadDevCA(dir); err == nil {
			return ca, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("transport: dev CA in %s is incomplete or corrupt (delete it to start over): %w", dir, err)
}

// Save writes the CA to dir as ca.pem and ca-key.pem (mode 0600), creating
// dir if needed. It never overwrites: if either file exists it fails with an
// error matching fs.ErrExist.
func (ca *DevCA) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("transport: save dev CA: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return fmt.Errorf("transport: save dev CA: marshal key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	// Key first: a reader that finds ca.pem is then sure to find the key.
	if err := writeExclusive(filepath.Join(dir, DevCAKeyFile), keyPEM, 0o600); err != nil {
		return fmt.Errorf("transport: save dev CA: %w", err)
	}
	if err := writeExclusive(filepath.Join(dir, DevCACertFile), ca.certPEM, 0o644); err != nil {
		return fmt.Errorf("transport: save dev CA: %w", err)
	}
	return nil
}

// writeExclusive creates path with data, failing if it exists. The content
// is written to a temporary file first and hard-linked into place, so a
// concurrent reader sees either no file or the whole file.
func writeExclusive(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName)
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Link(tmpName, path); err != nil {
		return err // *LinkError wrapping EEXIST matches fs.ErrExist
	}
	return nil
}

// Certificate returns the CA certificate.
func (ca *DevCA) Certificate() *x509.Certificate { return ca.cert }

// CertPEM returns the CA certificate in PEM form, as saved in ca.pem.
func (ca *DevCA) CertPEM() []byte { return slices.Clone(ca.certPEM) }

// Pool returns a certificate pool holding only this CA.
func (ca *DevCA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool
}

// Issue creates a leaf certificate with a fresh ed25519 key, valid for
// localhost, 127.0.0.1 and ::1 plus the extra names (DNS names or IP
// literals), usable both as a server and as a client certificate.
func (ca *DevCA) Issue(names ...string) (tls.Certificate, error) {
	return ca.IssueWithURIs(nil, names...)
}

// IssueWithURIs is Issue with URI subject alternative names as well (a
// cmdlog node's identity, broadside:node:<id>).
func (ca *DevCA) IssueWithURIs(uris []*url.URL, names ...string) (tls.Certificate, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("transport: dev CA: generate leaf key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return tls.Certificate{}, err
	}
	dnsNames := []string{"localhost"}
	ips := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	for _, name := range names {
		if ip, err := netip.ParseAddr(name); err == nil {
			if !slices.Contains(ips, ip.Unmap()) {
				ips = append(ips, ip.Unmap())
			}
		} else if name != "" && !slices.Contains(dnsNames, name) {
			dnsNames = append(dnsNames, name)
		}
	}
	commonName := "localhost"
	if len(names) > 0 && names[0] != "" {
		commonName = names[0]
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: []string{"Broadside"}},
		NotBefore:    now.Add(-devClockSkew),
		NotAfter:     now.Add(devLeafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     dnsNames,
		URIs:         uris,
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("transport: dev CA: create leaf certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("transport: dev CA: parse leaf certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// IssueFiles issues a leaf certificate (see Issue) and writes it to certFile
// and its key to keyFile (mode 0600) in PEM form, for processes configured
// with ServerTLS(certFile, keyFile). Existing files are replaced.
func (ca *DevCA) IssueFiles(certFile, keyFile string, names ...string) error {
	cert, err := ca.Issue(names...)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return fmt.Errorf("transport: dev CA: marshal leaf key: %w", err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return fmt.Errorf("transport: dev CA: write leaf key: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return fmt.Errorf("transport: dev CA: write leaf certificate: %w", err)
	}
	return nil
}

// ServerTLS returns a server config with a freshly issued leaf certificate
// for the default names plus names.
func (ca *DevCA) ServerTLS(names ...string) (*tls.Config, error) {
	cert, err := ca.Issue(names...)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}, nil
}

// ClientTLS returns a client config that trusts only this CA.
func (ca *DevCA) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS13}
}

// MutualTLS returns the two configs of a node on a mutually authenticated
// cluster: server demands client certificates signed by this CA, and client
// trusts this CA and presents the same freshly issued leaf (for the default
// names plus names) that server presents.
func (ca *DevCA) MutualTLS(names ...string) (server, client *tls.Config, err error) {
	cert, err := ca.Issue(names...)
	if err != nil {
		return nil, nil, err
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	return RequireClientCerts(server, ca.Pool()), WithClientCert(ca.ClientTLS(), cert), nil
}

func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("transport: certificate serial: %w", err)
	}
	return serial, nil
}
