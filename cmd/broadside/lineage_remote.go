package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/anoptic/broadside/internal/adminauth"
	"github.com/anoptic/broadside/lineage"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// linRemoteQueries are the lineage subcommands a server answers.
var linRemoteQueries = map[string]bool{"why": true, "affected": true, "frame": true, "info": true}

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
	body, _ := json.Marshal(args)
	url := strings.TrimSuffix(serverURL, "/") + "/lineage"
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	client := &http.Client{Timeout: 30 * time.Second}
	req, err := http.NewRequestWithContext(cmd.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != nil {
		req.Header.Set("Authorization", "Bearer "+string(token))
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("lineage server: %w", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("lineage server: %w", err)
	}
	if resp.StatusCode == http.StatusUnauthorized && token == nil {
		return fmt.Errorf("lineage server %s: give the server's admin token (--admin-token-file)", resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("lineage server %s: %s", resp.Status, strings.TrimSpace(string(out)))
	}
	_, err = cmd.OutOrStdout().Write(out)
	return err
}

// lineageHandler answers lineage queries from a running server's store:
// POST a JSON array of the arguments of 'broadside lineage' (the query
// and its flags), get what the command prints.
func lineageHandler(store func() (lineage.Store, func())) http.Handler {
	one := make(chan struct{}, 1) // one query at a time: each indexes the store
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST a JSON array of 'broadside lineage' arguments", http.StatusMethodNotAllowed)
			return
		}
		var args []string
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&args); err != nil || len(args) == 0 || len(args) > 32 {
			http.Error(w, "body must be a JSON array of 1 to 32 arguments", http.StatusBadRequest)
			return
		}
		if !linRemoteQueries[args[0]] {
			http.Error(w, fmt.Sprintf("unknown query %q (why, affected, frame, info)", args[0]), http.StatusBadRequest)
			return
		}
		select {
		case one <- struct{}{}:
			defer func() { <-one }()
		case <-r.Context().Done():
			return
		}
		s, release := store()
		if s == nil {
			release()
			http.Error(w, "no lineage store: the world is not running", http.StatusServiceUnavailable)
			return
		}
		// The query runs under the store's lock, with a deadline (a
		// stopping server waits for it); the answer is written after.
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		var out bytes.Buffer
		cmd := newLineageCmdWith(s)
		cmd.SetArgs(args)
		cmd.SetOut(&out)
		cmd.SetErr(io.Discard)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.ExecuteContext(ctx)
		cancel()
		release()
		if err != nil {
			code := http.StatusBadRequest
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				code = http.StatusServiceUnavailable
			}
			http.Error(w, err.Error(), code)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write(out.Bytes())
	})
}
