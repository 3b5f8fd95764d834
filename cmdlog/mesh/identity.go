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
}

// URI scheme and prefixes of the identity in a certificate's URI SANs:
// broadside:node:<id> and broadside:role:<role>.
const (
	uriScheme  = "broadside"
	nodePrefix = "node:"
	rolePrefix = "role:"
)

// URIs returns the URI SANs of the identity.
func (id Identity) URIs() []*url.URL {
	var us []*url.URL
	if id.ID != 0 {
		us = append(us, &url.URL{Scheme: uriScheme, Opaque: nodePrefix + strconv.FormatUint(uint64(id.ID), 10)})
	}
	return append(us, &url.URL{Scheme: uriScheme, Opaque: rolePrefix + string(id.Role)})
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
		default:
			return Identity{}, true, fmt.Errorf("certificate: unknown URI %q", u)
		}
	}
	if ok && (id.Role == "" || (id.Role != RoleClient && id.ID == 0)) {
		return Identity{}, true, fmt.Errorf("certificate: identity %+v needs a role, and a node id unless a client", id)
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

// checkPeer checks that the peer of a connection may be node peer. A
// certificate without an identity passes only if require is false.
func checkPeer(cs tls.ConnectionState, peer msg.NodeID, require bool) error {
	if len(cs.PeerCertificates) == 0 {
		if require {
			return errors.New("no peer certificate")
		}
		return nil
	}
	id, ok, err := IdentityOf(cs.PeerCertificates[0])
	if err != nil {
		return err
	}
	if !ok {
		if require {
			return errors.New("the peer certificate names no node identity (broadside:node:<id>, broadside:role:<role>)")
		}
		return nil
	}
	return id.Permits(peer)
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
// (role client, any client id) unless it exists. Concurrent callers
// agree on one file.
func EnsureDevClientCert(dir string, ca *transport.DevCA) error {
	path := filepath.Join(dir, DevClientFile)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	cert, err := ca.IssueWithURIs(Identity{Role: RoleClient}.URIs())
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return fmt.Errorf("mesh: client certificate key: %w", err)
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
	data = append(data, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})...)
	tmp, err := os.CreateTemp(dir, "."+DevClientFile+".tmp*")
	if err != nil {
		return fmt.Errorf("mesh: client certificate: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("mesh: client certificate: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("mesh: client certificate: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("mesh: client certificate: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("mesh: client certificate: %w", err)
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
