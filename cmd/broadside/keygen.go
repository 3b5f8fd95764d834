package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/anoptic/broadside/replay/bsr"
	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"
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
			skey, vkey, err := bsr.GenerateKey(name)
			if err != nil {
				return err
			}
			spath, vpath := filepath.Join(dir, "server.key"), filepath.Join(dir, "server.pub")
			flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
			if force {
				flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
			}
			for _, kf := range []struct {
				path, text string
				mode       os.FileMode
			}{{spath, skey, 0o600}, {vpath, vkey, 0o644}} {
				f, err := os.OpenFile(kf.path, flags, kf.mode)
				if errors.Is(err, os.ErrExist) {
					return fmt.Errorf("%s exists (give --force to replace it)", kf.path)
				} else if err != nil {
					return err
				}
				if _, err := fmt.Fprintln(f, kf.text); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
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

// loadSigner reads a signer key file made by keygen ("" gives nil).
func loadSigner(path string) (note.Signer, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signer key: %w", err)
	}
	s, err := bsr.NewSigner(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// loadVerifier reads a verifier key file made by keygen.
func loadVerifier(path string) (note.Verifier, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("verifier key: %w", err)
	}
	v, err := bsr.NewVerifier(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
