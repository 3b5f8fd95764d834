package mesh

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/codec"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/quic-go/quic-go"
)

// TestForgedIdentity (issue 16, finding 1): a peer that claims a node id
// its certificate does not prove is closed with CodeBadIdentity before
// any of its messages reaches the node; a client certificate still works
// for client ids.
func TestForgedIdentity(t *testing.T) {
	dir := t.TempDir()
	ca, err := transport.LoadOrCreateDevCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := EnsureDevClientCert(dir, ca); err != nil {
		t.Fatal(err)
	}
	srvTLS, cliTLS1, err := DevNodeTLS(ca, 1)
	if err != nil {
		t.Fatal(err)
	}
	in := node.NewInbox()
	m, err := New(Config{Self: 1, ServerTLS: srvTLS, ClientTLS: cliTLS1, Inbox: in, RequireIdentity: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	clientTLS, err := LoadDevClientTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, node3TLS, err := DevNodeTLS(ca, 3)
	if err != nil {
		t.Fatal(err)
	}
	_, plainTLS, err := ca.MutualTLS() // signed by the CA, no identity
	if err != nil {
		t.Fatal(err)
	}
	forged := msg.StartView{View: msg.ViewRecord{Number: 1 << 40, Members: []msg.NodeID{2}, Leader: 2}}
	appendMsg := msg.Append{View: 1, Records: []msg.Record{{ID: msg.RecordID{Client: 7, Seq: 1}, Data: []byte("x")}}}
	for _, tc := range []struct {
		name  string
		tls   *tls.Config
		claim msg.NodeID
		ok    bool
	}{
		{"client certificate claims replica 2", clientTLS, 2, false},
		{"client certificate claims shard 101", clientTLS, 101, false},
		{"replica 3's certificate claims replica 2", node3TLS, 2, false},
		{"certificate without identity claims replica 2", plainTLS, 2, false},
		{"certificate without identity claims a client id", plainTLS, ClientIDBase + 1, false},
		{"client certificate, client id", clientTLS, ClientIDBase + 7, true},
		{"replica 3's certificate, replica 3", node3TLS, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mm := msg.Message(forged)
			if tc.claim >= ClientIDBase {
				mm = appendMsg // a client's StartView is refused whatever its certificate (TestClientMessages)
			}
			code, delivered := rawPeer(t, tc.tls, m.Addr(), tc.claim, mm, in)
			if tc.ok {
				if !delivered {
					t.Fatalf("message from %d not delivered (close code %v)", tc.claim, code)
				}
				return
			}
			if delivered {
				t.Fatalf("a message claiming to be from %d was delivered", tc.claim)
			}
			if code != quic.ApplicationErrorCode(CodeBadIdentity) {
				t.Fatalf("link closed with code %v, want CodeBadIdentity (%d)", code, CodeBadIdentity)
			}
		})
	}
	if n := m.IdentityRejects(); n != 5 {
		t.Fatalf("IdentityRejects = %d, want 5", n)
	}
}

// rawPeer dials addr with cfg, claims id claim in its hello and sends mm.
// It returns the application code the connection was closed with (0 if
// it was not) and whether mm reached in.
func rawPeer(t *testing.T, cfg *tls.Config, addr string, claim msg.NodeID, mm msg.Message, in node.Inbox) (quic.ApplicationErrorCode, bool) {
	t.Helper()
	ep, err := transport.NewEndpoint(transport.Config{ListenAddr: "127.0.0.1:0", ClientTLS: cfg, ALPN: []string{ALPN},
		MaxFrameSize: codec.MaxMessageSize})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := ep.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	st, err := conn.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var hello [4]byte
	binary.BigEndian.PutUint32(hello[:], uint32(claim))
	if err := st.WriteFrame(hello[:]); err != nil {
		t.Fatal(err)
	}
	st.WriteFrame(codec.Encode(nil, mm))
	// Wait for the message, or for the connection to be closed.
	for {
		select {
		case env := <-in.C():
			if _, up := env.Msg.(msg.LinkUp); up {
				continue
			}
			if env.From != claim {
				t.Fatalf("delivered from %d, want %d", env.From, claim)
			}
			return 0, true
		case <-conn.Context().Done():
			var ae *quic.ApplicationError
			if errors.As(context.Cause(conn.Context()), &ae) {
				return ae.ErrorCode, false
			}
			t.Fatalf("connection ended: %v", context.Cause(conn.Context()))
		case <-ctx.Done():
			t.Fatal("neither delivered nor closed")
		}
	}
}

// TestDialChecksServerIdentity: a node that dials peer 2 but reaches a
// server presenting replica 3's certificate closes the link and sends
// it nothing.
func TestDialChecksServerIdentity(t *testing.T) {
	dir := t.TempDir()
	ca, err := transport.LoadOrCreateDevCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	s3, c3, err := DevNodeTLS(ca, 3)
	if err != nil {
		t.Fatal(err)
	}
	in3 := node.NewInbox()
	m3, err := New(Config{Self: 3, ServerTLS: s3, ClientTLS: c3, Inbox: in3, RequireIdentity: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m3.Close()
	s1, c1, err := DevNodeTLS(ca, 1)
	if err != nil {
		t.Fatal(err)
	}
	m1, err := New(Config{Self: 1, ServerTLS: s1, ClientTLS: c1, Inbox: node.NewInbox(), RequireIdentity: true,
		Peers: map[msg.NodeID]string{2: m3.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Close()
	deadline := time.After(2 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		m1.Send(msg.Envelope{From: 1, To: 2, Msg: msg.Seal{View: 1}})
		select {
		case env := <-in3.C():
			if _, up := env.Msg.(msg.LinkUp); !up {
				t.Fatalf("node 3 received %v meant for node 2", env)
			}
		case <-tick.C:
		case <-deadline:
			return // nothing reached node 3
		}
	}
}

// TestClientMessages (issue 16, finding 1): a client, whatever its
// certificate, may append, check the tail and read; a server-to-server
// message from it (a forged StartView or Store) closes its link with
// CodeUnauthorized before the node sees it, and so does a Trim from a
// certificate without broadside:perm:trim.
func TestClientMessages(t *testing.T) {
	dir := t.TempDir()
	ca, err := transport.LoadOrCreateDevCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := EnsureDevClientCert(dir, ca); err != nil {
		t.Fatal(err)
	}
	srvTLS, cliTLS1, err := DevNodeTLS(ca, 101)
	if err != nil {
		t.Fatal(err)
	}
	in := node.NewInbox()
	m, err := New(Config{Self: 101, ServerTLS: srvTLS, ClientTLS: cliTLS1, Inbox: in, RequireIdentity: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	trimmer, err := LoadDevClientTLS(dir) // the dev client.pem may trim
	if err != nil {
		t.Fatal(err)
	}
	reader := filepath.Join(t.TempDir(), "reader.pem")
	if err := IssueFiles(ca, Identity{Role: RoleClient}, nil, reader, "", false); err != nil {
		t.Fatal(err)
	}
	readerCert, err := tls.LoadX509KeyPair(reader, reader)
	if err != nil {
		t.Fatal(err)
	}
	readerTLS := transport.WithClientCert(ca.ClientTLS(), readerCert)
	const me = ClientIDBase + 9
	for _, tc := range []struct {
		name string
		tls  *tls.Config
		mm   msg.Message
		ok   bool
	}{
		{"read", readerTLS, msg.Read{ReqID: 1, From: 1, Max: 1}, true},
		{"check tail", readerTLS, msg.CheckTail{ReqID: 1}, true},
		{"trim with perm:trim", trimmer, msg.Trim{ReqID: 1, UpTo: 1}, true},
		{"trim without perm:trim", readerTLS, msg.Trim{ReqID: 1, UpTo: 1 << 40}, false},
		{"forged StartView", trimmer, msg.StartView{View: msg.ViewRecord{Number: 1 << 40, Members: []msg.NodeID{1}, Leader: 1}}, false},
		{"forged Store", trimmer, msg.Store{Epoch: 1 << 47, Batch: 1, Truncate: true}, false},
		{"forged StableGP", readerTLS, msg.StableGP{Epoch: 1 << 47, GP: 1 << 40}, false},
		{"forged Seal", readerTLS, msg.Seal{View: 9}, false},
		{"forged GC", readerTLS, msg.GC{View: 1, FromGP: 1, ToGP: 9}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, delivered := rawPeer(t, tc.tls, m.Addr(), me, tc.mm, in)
			if delivered != tc.ok {
				t.Fatalf("delivered %v, want %v (close code %v)", delivered, tc.ok, code)
			}
			if !tc.ok && code != quic.ApplicationErrorCode(transport.CodeUnauthorized) {
				t.Fatalf("closed with code %v, want CodeUnauthorized", code)
			}
		})
	}
	if n := m.Forbidden(); n != 6 {
		t.Fatalf("Forbidden = %d, want 6", n)
	}
}

// TestDevClientCertReissued: a client.pem from before perm:trim is
// issued again with it.
func TestDevClientCertReissued(t *testing.T) {
	dir := t.TempDir()
	ca, err := transport.LoadOrCreateDevCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, DevClientFile)
	if err := IssueFiles(ca, Identity{Role: RoleClient}, nil, path, "", false); err != nil {
		t.Fatal(err)
	}
	if err := EnsureDevClientCert(dir, ca); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := pemIdentity(b); !ok || !id.Trim || id.Role != RoleClient {
		t.Fatalf("client.pem identity %+v (ok %v)", id, ok)
	}
	if err := IssueFiles(ca, Identity{ID: 101, Role: RoleSeq}, nil, filepath.Join(dir, "x.pem"), "", false); err == nil {
		t.Fatal("issued a seq certificate for a shard id")
	}
	if err := IssueFiles(ca, Identity{ID: 1, Role: RoleSeq, Trim: true}, nil, filepath.Join(dir, "x.pem"), "", false); err == nil {
		t.Fatal("issued a trimming seq certificate")
	}
	if err := IssueFiles(ca, Identity{Role: RoleClient}, nil, path, "", false); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("overwrote without replace: %v", err)
	}
}

// TestIdentityOf covers the certificate identity parser.
func TestIdentityOf(t *testing.T) {
	ca, err := transport.NewDevCA()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []Identity{{ID: 1, Role: RoleSeq}, {ID: 101, Role: RoleShard}, {Role: RoleClient}, {Role: RoleClient, Trim: true}} {
		cert, err := ca.IssueWithURIs(id.URIs())
		if err != nil {
			t.Fatal(err)
		}
		got, ok, err := IdentityOf(cert.Leaf)
		if err != nil || !ok || got != id {
			t.Fatalf("IdentityOf(%+v) = %+v, %v, %v", id, got, ok, err)
		}
	}
	if err := (Identity{ID: 1, Role: RoleSeq}).Permits(101); err == nil {
		t.Fatal("a replica certificate permitted a shard id")
	}
	if err := (Identity{Role: RoleSeq}).Permits(1); err != nil {
		// IdentityOf never returns it, but Permits alone must not crash.
		_ = err
	}
}
