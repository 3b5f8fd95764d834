package mesh

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/transport"
)

// CodeBadIdentity closes a link whose peer claims a node id its
// certificate does not prove (DESIGN.md §10).
const CodeBadIdentity = transport.CodeFirstProtocolSpecific + 2

// Role is what a node certificate lets its holder be.
type Role string

// The roles of a cluster.
const (
	RoleSeq    Role = "seq"
	RoleShard  Role = "shard"
	RoleClient Role = "client"
)

// FirstShardID is the lowest shard id of the cluster numbering
// (sequencing replicas below it, clients from ClientIDBase).
const FirstShardID msg.NodeID = 101

// RoleOf returns the role id has in the cluster numbering.
func RoleOf(id msg.NodeID) Role {
	switch {
	case id >= ClientIDBase:
		return RoleClient
	case id >= FirstShardID:
		return RoleShard
	}
	return RoleSeq
}

// Identity is what a node certificate proves: its role and, for
// sequencing replicas and shards, its node id (0 for a client certificate,
// which may use any client id).
type Identity struct {
	ID   msg.NodeID
	Role Role
	// Trim lets a client discard the log's prefix (msg.Trim), which no
	// recovery can undo: only the game server's log client needs it
	// (world retention). A client certificate without it may append and
	// read; its Trim closes the link (transport.CodeUnauthorized).
	Trim bool
}

// URI scheme and prefixes of the identity in a certificate's URI SANs:
// broadside:node:<id>, broadside:role:<role> and broadside:perm:trim.
const (
	uriScheme  = "broadside"
	nodePrefix = "node:"
	rolePrefix = "role:"
	permTrim   = "perm:trim"
)

// URIs returns the URI SANs of the identity.
func (id Identity) URIs() []*url.URL {
	var us []*url.URL
	if id.ID != 0 {
		us = append(us, &url.URL{Scheme: uriScheme, Opaque: nodePrefix + strconv.FormatUint(uint64(id.ID), 10)})
	}
	us = append(us, &url.URL{Scheme: uriScheme, Opaque: rolePrefix + string(id.Role)})
	if id.Trim {
		us = append(us, &url.URL{Scheme: uriScheme, Opaque: permTrim})
	}
	return us
}

// IdentityOf reads the identity a certificate carries; ok is false when it
// carries none (no broadside: URI).
func IdentityOf(cert *x509.Certificate) (id Identity, ok bool, err error) {
	for _, u := range cert.URIs {
		if u.Scheme != uriScheme {
			continue
		}
		ok = true
		switch {
		case strings.HasPrefix(u.Opaque, nodePrefix):
			n, perr := strconv.ParseUint(strings.TrimPrefix(u.Opaque, nodePrefix), 10, 32)
			if perr != nil || n == 0 || id.ID != 0 {
				return Identity{}, true, fmt.Errorf("certificate: bad or repeated node URI %q", u)
			}
			id.ID = msg.NodeID(n)
		case strings.HasPrefix(u.Opaque, rolePrefix):
			r := Role(strings.TrimPrefix(u.Opaque, rolePrefix))
			if (r != RoleSeq && r != RoleShard && r != RoleClient) || id.Role != "" {
				return Identity{}, true, fmt.Errorf("certificate: bad or repeated role URI %q", u)
			}
			id.Role = r
		case u.Opaque == permTrim:
			if id.Trim {
				return Identity{}, true, fmt.Errorf("certificate: repeated URI %q", u)
			}
			id.Trim = true
		default:
			return Identity{}, true, fmt.Errorf("certificate: unknown URI %q", u)
		}
	}
	if ok && (id.Role == "" || (id.Role != RoleClient && id.ID == 0)) {
		return Identity{}, true, fmt.Errorf("certificate: identity %+v needs a role, and a node id unless a client", id)
	}
	if id.Trim && id.Role != RoleClient {
		return Identity{}, true, fmt.Errorf("certificate: only a client certificate carries %s:%s", uriScheme, permTrim)
	}
	return id, ok, nil
}

// Permits reports whether the identity may use node id peer: a sequencing
// replica or shard certificate only its own id, a client certificate only
// client ids (its own, if it names one).
func (id Identity) Permits(peer msg.NodeID) error {
	want := RoleOf(peer)
	if id.Role != want {
		return fmt.Errorf("node %d is a %s, the certificate's role is %s", peer, want, id.Role)
	}
	if id.ID != 0 && id.ID != peer {
		return fmt.Errorf("the certificate is node %d's, not node %d's", id.ID, peer)
	}
	return nil
}

// checkPeer checks that the peer of a connection may be node peer, and
// returns what it may do. A certificate without an identity passes only if
// require is false (and may then do what its node id's role does, Trim
// included: a cluster that requires no identities trusts its CA's every
// certificate).
func checkPeer(cs tls.ConnectionState, peer msg.NodeID, require bool) (Identity, error) {
	legacy := Identity{ID: peer, Role: RoleOf(peer), Trim: RoleOf(peer) == RoleClient}
	if len(cs.PeerCertificates) == 0 {
		if require {
			return Identity{}, errors.New("no peer certificate")
		}
		return legacy, nil
	}
	id, ok, err := IdentityOf(cs.PeerCertificates[0])
	if err != nil {
		return Identity{}, err
	}
	if !ok {
		if require {
			return Identity{}, errors.New("the peer certificate names no node identity (broadside:node:<id>, broadside:role:<role>)")
		}
		return legacy, nil
	}
	return id, id.Permits(peer)
}

// clientMessage reports whether a client may send m, under identity id:
// appends, tail checks and reads, and trims with Identity.Trim. Everything
// else is spoken between servers (a client's StartView, Store, Seal, GC or
// Heartbeat is forged), and closes the link.
func clientMessage(id Identity, m msg.Message) error {
	switch m.(type) {
	case msg.Append, msg.CheckTail, msg.Read:
		return nil
	case msg.Trim:
		if id.Trim {
			return nil
		}
		return errors.New("a Trim from a client certificate without broadside:perm:trim")
	}
	return fmt.Errorf("a client sent %T, which only log nodes send", m)
}

// DevNodeTLS returns a node's TLS configs, mutual TLS against ca with a
// freshly issued certificate that carries the node's identity (id and
// role RoleOf(id)), valid for the default names plus names.
func DevNodeTLS(ca *transport.DevCA, id msg.NodeID, names ...string) (server, client *tls.Config, err error) {
	ident := Identity{ID: id, Role: RoleOf(id)}
	if ident.Role == RoleClient {
		ident.ID = 0
	}
	cert, err := ca.IssueWithURIs(ident.URIs(), names...)
	if err != nil {
		return nil, nil, err
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	return transport.RequireClientCerts(server, ca.Pool()), transport.WithClientCert(ca.ClientTLS(), cert), nil
}

// DevClientFile is the client certificate and its key (one PEM file) a
// dev CA directory holds for the cluster's clients: nodes issue it once
// (EnsureDevClientCert), clients load it (LoadDevClientTLS) and never
// the CA key.
const DevClientFile = "client.pem"

// EnsureDevClientCert issues the client certificate of the dev CA in dir
// (role client, any client id, may trim: the dev directory is one trust
// domain, and the game server's log client trims) unless it exists.
// Concurrent callers agree on one file. A client.pem from before
// broadside:perm:trim is issued again.
func EnsureDevClientCert(dir string, ca *transport.DevCA) error {
	path := filepath.Join(dir, DevClientFile)
	ident := Identity{Role: RoleClient, Trim: true}
	if b, err := os.ReadFile(path); err == nil {
		if id, ok := pemIdentity(b); ok && id == ident {
			return nil
		}
		return issuePEM(ca, ident, nil, path, "", true)
	}
	if err := issuePEM(ca, ident, nil, path, "", false); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// pemIdentity reads the identity of the first certificate in a PEM file.
func pemIdentity(b []byte) (Identity, bool) {
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return Identity{}, false
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return Identity{}, false
		}
		id, ok, err := IdentityOf(cert)
		return id, ok && err == nil
	}
}

// IssueFiles issues a certificate carrying ident (URI SANs), valid for
// the default names plus names, signed by ca, and writes it to certFile
// and its key to keyFile (mode 0600), in PEM: the files logd's --cert and
// --key take ('broadside cert'). keyFile empty or equal to certFile: one
// file holds both (as the dev CA's client.pem). Existing files are
// replaced only if replace is set.
func IssueFiles(ca *transport.DevCA, ident Identity, names []string, certFile, keyFile string, replace bool) error {
	if ident.Role != RoleClient && ident.ID == 0 {
		return fmt.Errorf("mesh: a %s certificate needs a node id", ident.Role)
	}
	if ident.ID != 0 {
		if want := RoleOf(ident.ID); want != ident.Role {
			return fmt.Errorf("mesh: node %d is a %s in the cluster numbering, not a %s", ident.ID, want, ident.Role)
		}
	}
	if ident.Trim && ident.Role != RoleClient {
		return errors.New("mesh: only client certificates may trim")
	}
	return issuePEM(ca, ident, names, certFile, keyFile, replace)
}

func issuePEM(ca *transport.DevCA, ident Identity, names []string, certFile, keyFile string, replace bool) error {
	cert, err := ca.IssueWithURIs(ident.URIs(), names...)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return fmt.Errorf("mesh: certificate key: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if keyFile == "" || keyFile == certFile {
		return writeFile(certFile, append(certPEM, keyPEM...), 0o600, replace)
	}
	if err := writeFile(keyFile, keyPEM, 0o600, replace); err != nil {
		return err
	}
	return writeFile(certFile, certPEM, 0o644, replace)
}

// writeFile writes data to path through a temporary file: atomically
// replacing it (replace), or only if it does not exist yet (concurrent
// writers then agree on the first).
func writeFile(path string, data []byte, perm os.FileMode, replace bool) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("mesh: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("mesh: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("mesh: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("mesh: %w", err)
	}
	if replace {
		if err := os.Rename(tmp.Name(), path); err != nil {
			return fmt.Errorf("mesh: %w", err)
		}
		return nil
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("mesh: %s exists: %w", path, fs.ErrExist)
		}
		return fmt.Errorf("mesh: %w", err)
	}
	return nil
}

// LoadDevClientTLS returns a client's TLS config from a dev CA directory:
// it trusts the CA (ca.pem) and presents the client certificate
// (client.pem), and never reads the CA key.
func LoadDevClientTLS(dir string) (*tls.Config, error) {
	path := filepath.Join(dir, DevClientFile)
	cert, err := tls.LoadX509KeyPair(path, path)
	if err != nil {
		return nil, fmt.Errorf("mesh: %w (a log node creates it in its --tls-dir when it starts)", err)
	}
	cli, err := transport.ClientTLS(filepath.Join(dir, transport.DevCACertFile))
	if err != nil {
		return nil, err
	}
	return transport.WithClientCert(cli, cert), nil
}
