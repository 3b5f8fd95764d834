package main

import (
	"bytes"
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/netcode/transport"
)

// TestCertIssuesIdentities: 'broadside cert' writes a certificate whose
// URI SANs carry the identity asked for, refuses an id of another role
// and does not overwrite without --force.
func TestCertIssuesIdentities(t *testing.T) {
	dir := t.TempDir()
	if _, err := transport.LoadOrCreateDevCA(dir); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := newCertCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"--ca-dir", dir}, args...))
		err := cmd.Execute()
		return out.String(), err
	}
	for _, tc := range []struct {
		args []string
		want mesh.Identity
	}{
		{[]string{"--role", "seq", "--id", "2", "--name", "seq2.example"}, mesh.Identity{ID: 2, Role: mesh.RoleSeq}},
		{[]string{"--role", "shard", "--id", "101"}, mesh.Identity{ID: 101, Role: mesh.RoleShard}},
		{[]string{"--role", "client", "--trim"}, mesh.Identity{Role: mesh.RoleClient, Trim: true}},
		{[]string{"--role", "client"}, mesh.Identity{Role: mesh.RoleClient}},
	} {
		certFile, keyFile := filepath.Join(dir, strings.Join(tc.args, "")+".pem"), filepath.Join(dir, strings.Join(tc.args, "")+"-key.pem")
		if out, err := run(append(tc.args, "--cert", certFile, "--key", keyFile)...); err != nil {
			t.Fatalf("%v: %v %s", tc.args, err, out)
		}
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		id, ok, err := mesh.IdentityOf(pair.Leaf)
		if err != nil || !ok || id != tc.want {
			t.Fatalf("%v: identity %+v (ok %v, %v), want %+v", tc.args, id, ok, err, tc.want)
		}
		if _, err := run(append(tc.args, "--cert", certFile, "--key", keyFile)...); err == nil {
			t.Fatalf("%v: overwrote without --force", tc.args)
		}
	}
	if _, err := run("--role", "shard", "--id", "1", "--cert", filepath.Join(dir, "x.pem"), "--key", filepath.Join(dir, "x-key.pem")); err == nil {
		t.Fatal("issued a shard certificate for replica id 1")
	}
	if _, err := run("--role", "seq", "--cert", filepath.Join(dir, "y.pem"), "--key", filepath.Join(dir, "y-key.pem")); err == nil {
		t.Fatal("issued a seq certificate without an id")
	}
}
