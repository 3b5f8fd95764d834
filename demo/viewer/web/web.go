// Package web serves the replay viewer to browsers: the viewer compiled to
// WebAssembly (cmd/broadside-viewer built with GOOS=js GOARCH=wasm) with
// its page and Go's wasm_exec.js, the recordings it may open, and, for a
// live world, a spectator feed over WebSocket (package wsfeed) that each
// browser opens with a spectator token and that this server relays to the
// game server as a QUIC spectator session. The game server checks the
// token (a player token cannot open a spectator session) and enforces the
// spectator delay: the relay only ever holds what a spectator may see.
//
// Every path is relative, so the handler can be mounted under a prefix
// (broadside serve hosts it at /viewer/ on its admin address).
package web

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/tls"
	"embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anoptic/broadside/netcode/server"
)

// Files the viewer's build directory holds (make viewer-wasm writes them).
const (
	WasmFile     = "viewer.wasm"
	WasmExecFile = "wasm_exec.js"
)

//go:embed static
var static embed.FS

// Options configure a Handler.
type Options struct {
	// WasmDir holds the built viewer: WasmFile and WasmExecFile (Go's
	// $(go env GOROOT)/lib/wasm/wasm_exec.js, of the toolchain that built
	// it).
	WasmDir string
	// Recordings are the .bsr files browsers may open, by the name they
	// are served under; Open is the one the page opens (empty: the first
	// by name, or none).
	Recordings map[string]string
	Open       string
	// Live, if set, is the game server the page follows.
	Live *LiveOptions
	// Logger (default: discard).
	Logger *slog.Logger
}

// LiveOptions configure the spectator feed.
type LiveOptions struct {
	// Addr is the game server's QUIC address (broadside serve --listen).
	Addr string
	// TLS trusts the game server's certificate.
	TLS *tls.Config
	// Token, if set, gives each page a spectator token to present (a
	// fixed one, or one minted per page); without it the page must be
	// given one (?token=).
	Token func() (string, error)
	// DialTimeout bounds the QUIC session's opening (default 10 s).
	DialTimeout time.Duration
}

// Handler serves the viewer. Create it with New.
type Handler struct {
	o        Options
	log      *slog.Logger
	mux      *http.ServeMux
	wasm     []byte
	wasmGzip []byte
	wasmTime time.Time
	wasmExec []byte

	mu       sync.Mutex
	sessions int // live relays open
}

// New reads the built viewer from o.WasmDir and returns its handler.
func New(o Options) (*Handler, error) {
	h := &Handler{o: o, log: o.Logger, mux: http.NewServeMux()}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	var err error
	wasmPath := filepath.Join(o.WasmDir, WasmFile)
	if h.wasm, err = os.ReadFile(wasmPath); err != nil {
		return nil, fmt.Errorf("web: the viewer's WebAssembly (build it with 'make viewer-wasm'): %w", err)
	}
	if st, err := os.Stat(wasmPath); err == nil {
		h.wasmTime = st.ModTime()
	}
	if h.wasmExec, err = os.ReadFile(filepath.Join(o.WasmDir, WasmExecFile)); err != nil {
		return nil, fmt.Errorf("web: %s (copy it from $(go env GOROOT)/lib/wasm, as 'make viewer-wasm' does): %w", WasmExecFile, err)
	}
	if h.wasmGzip, err = Gzip(h.wasm); err != nil {
		return nil, err
	}
	for name, p := range o.Recordings {
		if name == "" || strings.ContainsAny(name, "/\\") {
			return nil, fmt.Errorf("web: recording name %q", name)
		}
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("web: recording %s: %w", name, err)
		}
	}
	if o.Open != "" {
		if _, ok := o.Recordings[o.Open]; !ok {
			return nil, fmt.Errorf("web: recording %q to open is not served", o.Open)
		}
	} else if names := h.names(); len(names) > 0 && o.Live == nil {
		h.o.Open = names[0]
	}
	if o.Live != nil && o.Live.DialTimeout <= 0 {
		h.o.Live.DialTimeout = 10 * time.Second
	}
	page, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	h.mux.Handle("GET /{$}", http.FileServerFS(page))
	h.mux.Handle("GET /viewer.js", http.FileServerFS(page))
	h.mux.HandleFunc("GET /"+WasmFile, h.serveWasm)
	h.mux.HandleFunc("GET /"+WasmExecFile, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		http.ServeContent(w, r, WasmExecFile, h.wasmTime, bytes.NewReader(h.wasmExec))
	})
	h.mux.HandleFunc("GET /config.json", h.serveConfig)
	h.mux.HandleFunc("GET /recordings/{$}", h.serveList)
	h.mux.HandleFunc("GET /recordings/{name}", h.serveRecording)
	h.mux.HandleFunc("GET /live", h.serveLive)
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h.mux.ServeHTTP(w, r)
}

// WasmSize returns the viewer's size in bytes, raw and gzipped (as served
// to browsers that accept gzip).
func (h *Handler) WasmSize() (raw, gzipped int) { return len(h.wasm), len(h.wasmGzip) }

// Gzip compresses b at the best compression.
func Gzip(b []byte) ([]byte, error) {
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func (h *Handler) serveWasm(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/wasm")
	w.Header().Add("Vary", "Accept-Encoding")
	body := h.wasm
	if acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		body = h.wasmGzip
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if strings.TrimSpace(strings.SplitN(part, ";", 2)[0]) == "gzip" {
			return true
		}
	}
	return false
}

func (h *Handler) names() []string {
	names := make([]string, 0, len(h.o.Recordings))
	for n := range h.o.Recordings {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Config is what the page asks for first (config.json): what to open.
// The viewer's URL parameters (?recording=URL, ?live=URL&token=T)
// override it.
type Config struct {
	// Recording is the URL of the recording to open (relative to the
	// page), or "".
	Recording string `json:"recording,omitempty"`
	// Live is the URL of the spectator feed (relative: "live"), or "".
	Live string `json:"live,omitempty"`
	// Token is a spectator token for the feed.
	Token string `json:"token,omitempty"`
	// Recordings lists the recordings served.
	Recordings []string `json:"recordings"`
}

func (h *Handler) serveConfig(w http.ResponseWriter, r *http.Request) {
	c := Config{Recordings: h.names()}
	if h.o.Open != "" {
		c.Recording = "recordings/" + h.o.Open
	}
	if h.o.Live != nil {
		c.Live = "live"
		if h.o.Live.Token != nil {
			tok, err := h.o.Live.Token()
			if err != nil {
				http.Error(w, "no spectator token: "+err.Error(), http.StatusInternalServerError)
				return
			}
			c.Token = tok
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(c)
}

func (h *Handler) serveList(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(h.names())
}

func (h *Handler) serveRecording(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	p, ok := h.o.Recordings[name]
	if !ok || path.Base(name) != name {
		http.NotFound(w, r)
		return
	}
	f, err := os.Open(p)
	if err != nil {
		http.Error(w, "recording unavailable", http.StatusNotFound)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, "recording unavailable", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, name, st.ModTime(), f)
}

// Serve serves h on addr until ctx ends.
func Serve(ctx context.Context, addr string, h http.Handler, ready func(addr string)) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ln, err := listen(addr)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}

// SpectatorTokens returns a token source for LiveOptions.Token: a fresh
// spectator token (audience spectator, so it cannot play) for each page,
// valid for ttl, signed with the game server's secret. Each token has its
// own player id (spectator ids are drawn from the top half of the id
// space, which registries do not assign), since the game server admits at
// most two spectators per id.
func SpectatorTokens(secret []byte, ttl time.Duration) func() (string, error) {
	return func() (string, error) {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		id := binary.BigEndian.Uint32(b[:])>>1 | 1<<31
		return server.IssueToken(secret, server.Claims{Player: "web-spectator", PlayerID: id, Audience: server.AudienceSpectator,
			Expires: time.Now().Add(ttl)})
	}
}
