package main

import (
	"fmt"
	"path/filepath"

	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/spf13/cobra"
)

// certOptions are the flags of 'broadside cert'.
type certOptions struct {
	caDir, role, certFile, keyFile string
	id                             uint32
	trim, force                    bool
	names                          []string
}

// newCertCmd is 'broadside cert': an operator issues a log node's or
// client's certificate, with its identity in URI SANs, from the CA.
func newCertCmd() *cobra.Command {
	var o certOptions
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Issue a log node's or client's certificate (with its node id and role) from the cluster CA",
		Long: `Issue a certificate for one node or client of a command log cluster, signed by
the CA in --ca-dir (ca.pem and ca-key.pem, as 'logd --tls-dir' creates). The
certificate carries the identity the nodes check (URI SANs broadside:node:<id>
and broadside:role:<role>, plus broadside:perm:trim for a client allowed to
trim the log): a node whose claimed id its certificate does not prove is
refused, a client may append and read but never speak for a node, and only a
client with --trim may discard the log's prefix (give that one to the game
server when it runs with --retain).

Run it where the CA key is, then copy the files to the node; the nodes and
clients take them with --ca CA-DIR/ca.pem --cert FILE --key FILE and never
see the CA key.`,
		Example: `  broadside cert --ca-dir ca --role seq --id 1 --name seq1.example.net --cert seq1.pem --key seq1-key.pem
  broadside cert --ca-dir ca --role shard --id 101 --name 10.0.0.7 --cert shard101.pem --key shard101-key.pem
  broadside cert --ca-dir ca --role client --trim --cert game.pem --key game-key.pem
  broadside cert --ca-dir ca --role client --cert reader.pem --key reader-key.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := transport.LoadDevCA(o.caDir)
			if err != nil {
				return err
			}
			ident := mesh.Identity{ID: msg.NodeID(o.id), Role: mesh.Role(o.role), Trim: o.trim}
			if err := mesh.IssueFiles(ca, ident, o.names, o.certFile, o.keyFile, o.force); err != nil {
				return err
			}
			who := fmt.Sprintf("node %d (%s)", o.id, o.role)
			if ident.Role == mesh.RoleClient {
				who = "a client"
				if o.trim {
					who += " that may trim"
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "issued %s: %s, key %s\nuse: --ca %s --cert %s --key %s\n",
				who, o.certFile, o.keyFile, filepath.Join(o.caDir, transport.DevCACertFile), o.certFile, o.keyFile)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.caDir, "ca-dir", "broadside-dev/tls", "directory of the CA (ca.pem, ca-key.pem)")
	f.StringVar(&o.role, "role", "", "seq, shard or client")
	f.Uint32Var(&o.id, "id", 0, "the node id (seq 1..100, shard 101..; not for a client)")
	f.BoolVar(&o.trim, "trim", false, "client only: may trim the log (the game server's log client with --retain)")
	f.StringSliceVar(&o.names, "name", nil, "host names and IP addresses the node is reached at (localhost and loopback are always included)")
	f.StringVar(&o.certFile, "cert", "", "certificate file to write")
	f.StringVar(&o.keyFile, "key", "", "private key file to write (mode 0600)")
	f.BoolVar(&o.force, "force", false, "replace existing files")
	cmd.MarkFlagRequired("role")
	cmd.MarkFlagRequired("cert")
	cmd.MarkFlagRequired("key")
	return cmd
}
