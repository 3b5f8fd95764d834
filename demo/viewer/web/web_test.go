package web_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/anoptic/broadside/demo/viewer"
	"github.com/anoptic/broadside/demo/viewer/web"
	"github.com/anoptic/broadside/demo/viewer/web/livetest"
	"github.com/anoptic/broadside/demo/viewer/wsfeed"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay/bsr"
)

// fakeBuild writes a stand-in for the built viewer (the real one is built
// for js/wasm by make viewer-wasm; the browser tests use it).
func fakeBuild(t *testing.T) (dir string, wasm []byte) {
	dir = t.TempDir()
	wasm = bytes.Repeat([]byte("\x00asm viewer "), 5000)
	if err := os.WriteFile(filepath.Join(dir, web.WasmFile), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, web.WasmExecFile), []byte("// wasm_exec.js\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, wasm
}

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	tr := &http.Transport{DisableCompression: true}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestServesViewerAndRecordings checks the page, the WebAssembly (gzipped
// for browsers that take it), config.json, and that only the recordings
// given are served, with ranges.
func TestServesViewerAndRecordings(t *testing.T) {
	dir, wasm := fakeBuild(t)
	ctx := context.Background()
	m, err := viewer.PlayMatch(ctx, viewer.MatchOptions{Seed: 3, Ships: 8, Ticks: 120})
	if err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(t.TempDir(), "m.bsr")
	if _, err := m.WriteRecording(ctx, rec, bsr.SnapshotPolicy{}); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret") // not served
	os.WriteFile(secret, []byte("do not serve me"), 0o600)
	h, err := web.New(web.Options{WasmDir: dir, Recordings: map[string]string{"m.bsr": rec}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	defer ts.Close()

	resp, page := get(t, ts.URL+"/", nil)
	if resp.StatusCode != 200 || !bytes.Contains(page, []byte("viewer.js")) || !bytes.Contains(page, []byte("wasm_exec.js")) {
		t.Fatalf("page: %s %q", resp.Status, page)
	}
	resp, raw := get(t, ts.URL+"/viewer.wasm", nil)
	if resp.Header.Get("Content-Type") != "application/wasm" || !bytes.Equal(raw, wasm) {
		t.Fatalf("viewer.wasm: %s, %d bytes", resp.Header.Get("Content-Type"), len(raw))
	}
	resp, gz := get(t, ts.URL+"/viewer.wasm", map[string]string{"Accept-Encoding": "br, gzip"})
	if resp.Header.Get("Content-Encoding") != "gzip" || len(gz) >= len(wasm) {
		t.Fatalf("gzip: %q, %d bytes of %d", resp.Header.Get("Content-Encoding"), len(gz), len(wasm))
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	if un, _ := io.ReadAll(zr); !bytes.Equal(un, wasm) {
		t.Fatal("gzipped viewer.wasm does not decompress to it")
	}
	_, cb := get(t, ts.URL+"/config.json", nil)
	var c web.Config
	if err := json.Unmarshal(cb, &c); err != nil || c.Recording != "recordings/m.bsr" || c.Live != "" {
		t.Fatalf("config %s: %+v %v", cb, c, err)
	}
	want, _ := os.ReadFile(rec)
	resp, got := get(t, ts.URL+"/recordings/m.bsr", nil)
	if resp.StatusCode != 200 || !bytes.Equal(got, want) {
		t.Fatalf("recording: %s, %d bytes of %d", resp.Status, len(got), len(want))
	}
	resp, part := get(t, ts.URL+"/recordings/m.bsr", map[string]string{"Range": "bytes=8-15"})
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(part, want[8:16]) {
		t.Fatalf("range: %s %x", resp.Status, part)
	}
	for _, p := range []string{"/recordings/secret", "/recordings/..%2fsecret", "/recordings/" + url(secret), "/live"} {
		if resp, _ := get(t, ts.URL+p, nil); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("%s: %s, want 404", p, resp.Status)
		}
	}
	// The recording served opens in the viewer as it does from a file.
	r, err := viewer.OpenRecordingBytes(ctx, "m.bsr", got, viewer.RecordingOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	v, err := r.WaitVerified(ctx)
	if err != nil || v.State != viewer.VerifyOK {
		t.Fatalf("verification of the served recording: %+v %v", v, err)
	}
	if _, last := r.Ticks(); last != 120 {
		t.Fatalf("last tick %d", last)
	}
}

func url(p string) string { return strings.ReplaceAll(p, "/", "%2f") }

// TestLiveRelay follows a live world through the WebSocket relay as the
// browser does (wsfeed, viewer.Live): every frame shown is the server's
// frame of that tick, never newer than the spectator delay allows; a
// player token, a missing token and a frame other than Hello are refused.
func TestLiveRelay(t *testing.T) {
	const delay = 45
	w, err := livetest.Start(livetest.Options{Delay: delay})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	dir, _ := fakeBuild(t)
	tok, err := w.Token(7001, server.AudienceSpectator)
	if err != nil {
		t.Fatal(err)
	}
	h, err := web.New(web.Options{WasmDir: dir, Live: &web.LiveOptions{Addr: w.Server.Addr(), TLS: w.ClientTLS,
		Token: func() (string, error) { return tok, nil }}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	defer ts.Close()
	wsURL := "ws" + strings.TrimPrefix(ts.URL, "http") + "/live"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	_, cb := get(t, ts.URL+"/config.json", nil)
	var c web.Config
	if err := json.Unmarshal(cb, &c); err != nil || c.Live != "live" || c.Token != tok || c.Recording != "" {
		t.Fatalf("config %s: %v", cb, err)
	}
	feed, err := wsfeed.Dial(ctx, wsURL, c.Token)
	if err != nil {
		t.Fatal(err)
	}
	live, err := viewer.NewLive(ctx, feed, viewer.LiveOptions{Addr: "relay", History: 300})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	first, _ := live.Ticks()
	minLag := uint64(1 << 62)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		_, last := live.Ticks()
		now := w.Tick()
		if lag := now - last; lag < minLag {
			minLag = lag
		}
		if last >= first+90 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	f0, last := live.Ticks()
	if last < first+90 {
		t.Fatalf("followed ticks %d..%d only", first, last)
	}
	if minLag < delay {
		t.Fatalf("the spectator saw tick %d ticks behind the world, the delay is %d", minLag, delay)
	}
	held := 0
	for tick := f0; tick <= last; tick++ {
		if err := live.Seek(tick); err != nil {
			t.Fatal(err)
		}
		got := live.Frame()
		want := w.Frame(tick)
		if got.Tick != tick || want == nil {
			continue
		}
		held++
		if len(got.Ships) != len(want.Ships) || len(got.Balls) != len(want.Balls) {
			t.Fatalf("tick %d: %d ships %d balls, server %d %d", tick, len(got.Ships), len(got.Balls), len(want.Ships), len(want.Balls))
		}
		for i, v := range want.Ships {
			if g := got.Ships[i]; g.ID != v.ID || g.X != v.X || g.Y != v.Y || g.Hull != v.Hull || g.Sunk != v.Sunk {
				t.Fatalf("tick %d: ship %+v, server %+v", tick, g, v)
			}
		}
	}
	if held < 60 {
		t.Fatalf("only %d frames of %d..%d compared", held, f0, last)
	}

	// Refusals.
	ptok, _ := w.Token(7002, server.AudiencePlayer)
	for name, token := range map[string]string{"player token": ptok, "no token": "", "forged": tok[:len(tok)-2] + "xx"} {
		if _, err := wsfeed.Dial(ctx, wsURL, token); err == nil || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("%s: %v, want refused", name, err)
		}
	}
	conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{Subprotocols: []string{wsfeed.Subprotocol}})
	if err != nil {
		t.Fatal(err)
	}
	conn.Write(ctx, websocket.MessageBinary, wire.EncodeSession(nil, wire.StateAck{Tick: 1}))
	m, err := wsfeed.ReadSession(ctx, conn)
	if g, ok := m.(wire.Goodbye); !ok || g.Code != web.CodeProtocol {
		t.Fatalf("a StateAck first: %#v %v, want a protocol Goodbye", m, err)
	}
	conn.CloseNow()
	// Without the subprotocol, or from another origin, no feed opens.
	if c2, _, err := websocket.Dial(ctx, wsURL, nil); err == nil {
		_, _, rerr := c2.Read(ctx)
		if websocket.CloseStatus(rerr) != websocket.StatusPolicyViolation {
			t.Fatalf("no subprotocol: %v", rerr)
		}
	}
	if _, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{Subprotocols: []string{wsfeed.Subprotocol},
		HTTPHeader: http.Header{"Origin": []string{"https://evil.example"}}}); err == nil {
		t.Fatal("a cross-origin page opened a feed")
	}
}
