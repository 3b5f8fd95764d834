package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/anoptic/broadside/demo/viewer/web"
	"github.com/anoptic/broadside/netcode/transport"
)

// viewOptions are the flags of 'broadside view'.
type viewOptions struct {
	listen, webDir, server, caFile, token, tokenFile, secretFile string
	tokenTTL                                                     time.Duration
}

func newViewCmd() *cobra.Command {
	var o viewOptions
	cmd := &cobra.Command{
		Use:   "view [FILE.bsr ...] [--server ADDR]",
		Short: "Watch a match in the browser: serve the WebAssembly viewer, recordings and a live spectator feed",
		Long: `View serves the replay viewer compiled to WebAssembly (build it with
'make viewer-wasm', into --web-dir) over HTTP on --listen, with the .bsr
recordings given (the first opens; the page can open any listed, or a file
the user picks), and with --server a live world: each page gets a spectator
feed over WebSocket that this command relays to the game server as a QUIC
spectator session, with a spectator token (--token, --token-file, or one
minted per page with --secret-file). The game server checks the token and
enforces its --spectator-delay.`,
		Example: `  make viewer-wasm
  broadside view match.bsr                      # then open http://127.0.0.1:8080/
  broadside view --server 127.0.0.1:4433 --secret-file broadside-dev/server.secret`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runView(ctx, cmd, o, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:8080", "HTTP address to serve the viewer on")
	f.StringVar(&o.webDir, "web-dir", "bin/web", "the built viewer (viewer.wasm and wasm_exec.js: make viewer-wasm)")
	f.StringVar(&o.server, "server", "", "follow the live game server at `ADDR` (broadside serve --listen)")
	f.StringVar(&o.caFile, "ca", "broadside-dev/tls/ca.pem", "--server: CA certificate to trust")
	f.StringVar(&o.token, "token", "", "--server: the spectator token pages present")
	f.StringVar(&o.tokenFile, "token-file", "", "--server: read the spectator token from `FILE`")
	f.StringVar(&o.secretFile, "secret-file", "", "--server: mint a spectator token per page with the game server's secret `FILE`")
	f.DurationVar(&o.tokenTTL, "token-ttl", time.Hour, "--secret-file: how long each minted token is valid")
	return cmd
}

func runView(ctx context.Context, cmd *cobra.Command, o viewOptions, files []string) error {
	if len(files) == 0 && o.server == "" {
		return fmt.Errorf("give recordings (FILE.bsr) or --server ADDR")
	}
	wo := web.Options{WasmDir: o.webDir, Recordings: map[string]string{}}
	for i, p := range files {
		name := filepath.Base(p)
		if _, dup := wo.Recordings[name]; dup {
			return fmt.Errorf("two recordings named %s", name)
		}
		wo.Recordings[name] = p
		if i == 0 {
			wo.Open = name
		}
	}
	if o.server != "" {
		tlsConf, err := transport.ClientTLS(o.caFile)
		if err != nil {
			return fmt.Errorf("--ca: %w", err)
		}
		live := &web.LiveOptions{Addr: o.server, TLS: tlsConf}
		if live.Token, err = web.TokenSource(o.token, o.tokenFile, o.secretFile, o.tokenTTL); err != nil {
			return err
		}
		wo.Live = live
		wo.Open = "" // the live world opens; recordings stay listed
	}
	h, err := web.New(wo)
	if err != nil {
		return err
	}
	raw, gz := h.WasmSize()
	return web.Serve(ctx, o.listen, h, func(addr string) {
		fmt.Fprintf(cmd.OutOrStdout(), "viewer: http://%s/ (viewer.wasm %.1f MB, %.1f MB gzipped)\n", addr, float64(raw)/1e6, float64(gz)/1e6)
	})
}

// addViewer adds the browser viewer at /viewer/ to serve's admin handlers
// when --viewer-dir is given: pages follow this server as spectators
// (a token minted per page), over its own player address.
func addViewer(handlers map[string]http.Handler, o serveOptions, secret []byte) error {
	if o.viewerDir == "" {
		return nil
	}
	var tlsConf *tls.Config
	if o.dev {
		var err error
		if tlsConf, err = transport.ClientTLS(filepath.Join(o.tlsDir, transport.DevCACertFile)); err != nil {
			return fmt.Errorf("--viewer-dir: %w", err)
		}
	}
	h, err := web.New(web.Options{WasmDir: o.viewerDir, Live: &web.LiveOptions{Addr: o.listen, TLS: tlsConf, Token: web.SpectatorTokens(secret, time.Hour)}})
	if err != nil {
		return fmt.Errorf("--viewer-dir: %w", err)
	}
	handlers["/viewer/"] = http.StripPrefix("/viewer", h)
	return nil
}
