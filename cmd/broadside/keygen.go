package main

import (
	"fmt"

	"github.com/anoptic/broadside/replay/bsr"
	"github.com/spf13/cobra"
)

// newKeygenCmd is `broadside keygen`: a server's checkpoint signing key.
func newKeygenCmd() *cobra.Command {
	var name, dir string
	var force bool
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Make the server key that signs recordings' log checkpoints",
		Long: `Make an ed25519 key pair in golang.org/x/mod/sumdb/note format: server.key (the
signer key: keep it secret, give it to 'serve --key', 'demo --key' or 'replay
export --key') and server.pub (the verifier key: publish it, give it to 'replay
verify --key'). A signed recording carries a Merkle tree checkpoint of the
command log signed with the key at least every 5 s of match time and at its end,
so anyone with server.pub can check offline that no command was added, dropped,
reordered or changed.`,
		Example: `  broadside keygen --name my-server
  broadside demo --duration 6s --key server.key --recording demo.bsr
  broadside replay verify --key server.pub demo.bsr`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spath, vpath, vkey, err := bsr.WriteKeyFiles(dir, name, force)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (signer key, keep it secret) and %s (verifier key %s)\n", spath, vpath, vkey)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "broadside-server", "the key's name (in every signature)")
	cmd.Flags().StringVar(&dir, "dir", ".", "where to write server.key and server.pub")
	cmd.Flags().BoolVar(&force, "force", false, "replace existing key files")
	return cmd
}
