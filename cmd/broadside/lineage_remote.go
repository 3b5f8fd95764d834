package main

import (
	"context"
	"io"
	"net/http"

	"github.com/anoptic/broadside/internal/adminauth"
	"github.com/anoptic/broadside/lineage"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// linAskServer sends the query of cmd (its name and the flags given) to a
// server's admin endpoint /lineage, with the bearer token of tokenFile
// (empty: none), and prints the answer.
func linAskServer(cmd *cobra.Command, serverURL, tokenFile string) error {
	var token []byte
	if tokenFile != "" {
		var err error
		if token, err = adminauth.ReadToken(tokenFile); err != nil {
			return err
		}
	}
	args := []string{cmd.Name()}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if f.Name != "server" && f.Name != "store" && f.Name != "admin-token-file" {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	out, err := lineage.AskServer(cmd.Context(), serverURL, token, args)
	if err != nil {
		return err
	}
	_, err = cmd.OutOrStdout().Write(out)
	return err
}

// lineageHandler answers lineage queries from a running server's store
// (lineage.QueryHandler running 'broadside lineage' on it).
func lineageHandler(store func() (lineage.Store, func())) http.Handler {
	return lineage.QueryHandler(store, func(ctx context.Context, s lineage.Store, args []string, out io.Writer) error {
		cmd := newLineageCmdWith(s)
		cmd.SetArgs(args)
		cmd.SetOut(out)
		cmd.SetErr(io.Discard)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		return cmd.ExecuteContext(ctx)
	})
}
