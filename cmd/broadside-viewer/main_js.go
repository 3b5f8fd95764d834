//go:build js

// The browser build of broadside-viewer (GOOS=js GOARCH=wasm): the same
// model (demo/viewer) and Ebitengine front end (demo/viewer/ebitenview)
// as the desktop window, drawing with WebGL in the page 'broadside view'
// serves. It opens what the page's URL names (?recording=URL,
// ?live=URL&token=T, ?tick=N, ?select=P, ?speed=X, ?play=1), else what
// the server's config.json names, else a recording the user picks. After
// every frame it publishes the viewer's state (viewer.State) to
// JavaScript as broadsideViewer.state(), and takes actions through
// broadsideViewer.seek(t), .select(p), .key(name): the browser tests'
// hooks.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"syscall/js"
	"time"

	"github.com/hajimehoshi/ebiten/v2"

	"github.com/anoptic/broadside/demo/viewer"
	"github.com/anoptic/broadside/demo/viewer/ebitenview"
	"github.com/anoptic/broadside/demo/viewer/wsfeed"
)

// maxRecordingBytes bounds a recording loaded into the page's memory.
const maxRecordingBytes = 512 << 20

// page is what the page's JavaScript sees of the viewer.
type page struct {
	mu       sync.Mutex
	state    []byte // the JSON of viewer.State, after the last frame
	frames   uint64
	firstMS  float64   // time to the first frame drawn, from the page's navigation
	drawTime []float64 // recent frame intervals, ms
	last     time.Time
}

var keys = map[string]viewer.Key{
	"play": viewer.KeyPlayPause, "back": viewer.KeyStepBack, "forward": viewer.KeyStepForward,
	"second-back": viewer.KeySecondBack, "second-forward": viewer.KeySecondForward,
	"faster": viewer.KeyFaster, "slower": viewer.KeySlower, "first": viewer.KeyFirst, "last": viewer.KeyLast,
	"help": viewer.KeyHelp, "escape": viewer.KeyEscape, "fit": viewer.KeyFit, "follow": viewer.KeyFollow,
}

func status(msg string) {
	if el := js.Global().Get("document").Call("getElementById", "status"); el.Truthy() {
		el.Set("textContent", msg)
	}
}

func main() {
	p := &page{}
	if err := run(p); err != nil {
		status("broadside-viewer: " + err.Error())
		fmt.Println("broadside-viewer:", err)
	}
}

// resolve returns ref relative to the page's URL.
func resolve(ref string) (*url.URL, error) {
	base, err := url.Parse(js.Global().Get("location").Get("href").String())
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(ref)
	if err != nil {
		return nil, err
	}
	return base.ResolveReference(u), nil
}

func fetch(ctx context.Context, ref string, limit int64) ([]byte, error) {
	u, err := resolve(ref)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", u, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", u, limit)
	}
	return b, nil
}

// pageConfig is config.json (web.Config), as far as the viewer reads it.
type pageConfig struct {
	Recording, Live, Token string
}

// openSource opens what the URL or the server's configuration names, or
// waits for the user to pick a file.
func openSource(ctx context.Context, q url.Values) (viewer.Source, error) {
	var c pageConfig
	if q.Get("recording") == "" && q.Get("live") == "" {
		if b, err := fetch(ctx, "config.json", 1<<16); err == nil {
			json.Unmarshal(b, &c)
		}
	}
	if v := q.Get("recording"); v != "" {
		c = pageConfig{Recording: v}
	}
	if v := q.Get("live"); v != "" {
		c = pageConfig{Live: v, Token: q.Get("token")}
	}
	if v := q.Get("token"); v != "" {
		c.Token = v
	}
	switch {
	case c.Live != "":
		u, err := resolve(c.Live)
		if err != nil {
			return nil, err
		}
		switch u.Scheme {
		case "http":
			u.Scheme = "ws"
		case "https":
			u.Scheme = "wss"
		}
		status("connecting to " + u.String() + " ...")
		dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		feed, err := wsfeed.Dial(dctx, u.String(), c.Token)
		if err != nil {
			return nil, err
		}
		return viewer.NewLive(dctx, feed, viewer.LiveOptions{Addr: u.Host})
	case c.Recording != "":
		status("loading " + c.Recording + " ...")
		b, err := fetch(ctx, c.Recording, maxRecordingBytes)
		if err != nil {
			return nil, err
		}
		u, _ := resolve(c.Recording)
		return viewer.OpenRecordingBytes(ctx, lastSegment(u), b, viewer.RecordingOptions{})
	}
	return pickFile(ctx)
}

func lastSegment(u *url.URL) string {
	if u == nil {
		return "recording"
	}
	p := u.Path
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}

// pickFile shows the page's file picker and opens the recording chosen.
func pickFile(ctx context.Context) (viewer.Source, error) {
	type picked struct {
		name string
		data []byte
	}
	got := make(chan picked, 1)
	open := js.FuncOf(func(this js.Value, args []js.Value) any {
		if len(args) < 2 {
			return nil
		}
		n := args[1].Get("length").Int()
		if n > maxRecordingBytes {
			status(fmt.Sprintf("%s: larger than %d bytes", args[0].String(), maxRecordingBytes))
			return nil
		}
		b := make([]byte, n)
		js.CopyBytesToGo(b, args[1])
		select {
		case got <- picked{args[0].String(), b}:
		default:
		}
		return nil
	})
	defer open.Release()
	js.Global().Set("broadsideOpenFile", open)
	if el := js.Global().Get("document").Call("getElementById", "picker"); el.Truthy() {
		el.Set("hidden", false)
	}
	status("pick a .bsr recording")
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case f := <-got:
			status("opening " + f.name + " ...")
			src, err := viewer.OpenRecordingBytes(ctx, f.name, f.data, viewer.RecordingOptions{})
			if err != nil {
				status(err.Error())
				continue
			}
			if el := js.Global().Get("document").Call("getElementById", "picker"); el.Truthy() {
				el.Set("hidden", true)
			}
			return src, nil
		}
	}
}

// setUp applies the URL's starting state.
func setUp(m *viewer.Model, q url.Values) error {
	if v := q.Get("tick"); v != "" {
		t, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("tick=%q: %w", v, err)
		}
		m.SeekTo(t)
	}
	if v := q.Get("speed"); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("speed=%q: %w", v, err)
		}
		for m.Speed() < s && m.Speed() < viewer.Speeds[len(viewer.Speeds)-1] {
			m.Key(viewer.KeyFaster)
		}
		for m.Speed() > s && m.Speed() > viewer.Speeds[0] {
			m.Key(viewer.KeySlower)
		}
	}
	if v := q.Get("select"); v != "" {
		p, err := strconv.ParseUint(v, 10, 32)
		if err != nil || !m.SelectPlayer(uint32(p)) {
			return fmt.Errorf("select=%q: no such ship at tick %d", v, m.Tick())
		}
	}
	if q.Get("play") == "1" && !m.Playing() {
		m.Key(viewer.KeyPlayPause)
	}
	return nil
}

func run(p *page) error {
	ctx := context.Background()
	u, err := resolve("")
	if err != nil {
		return err
	}
	q := u.Query()
	src, err := openSource(ctx, q)
	if err != nil {
		return err
	}
	defer src.Close()
	win := js.Global().Get("window")
	w, h := win.Get("innerWidth").Int(), win.Get("innerHeight").Int()
	m := viewer.NewModel(src, w, h)
	if err := setUp(m, q); err != nil {
		return err
	}
	g := ebitenview.New(m)
	g.OnDraw(func(m *viewer.Model, scene *viewer.Scene) { p.publish(m, scene) })
	p.export(g)
	status("")
	ebiten.SetWindowTitle("Broadside viewer: " + src.World().Title)
	ebiten.SetWindowResizingMode(ebiten.WindowResizingModeEnabled)
	if err := ebiten.RunGame(g); err != nil && !errors.Is(err, ebiten.Termination) {
		return err
	}
	return nil
}

// publish records the state after a frame.
func (p *page) publish(m *viewer.Model, scene *viewer.Scene) {
	now := time.Now()
	b, err := json.Marshal(m.State(scene))
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		p.state = b
	}
	if p.frames == 0 {
		// performance.now() counts from the page's navigation: the time to
		// the first frame includes loading the viewer and the recording.
		p.firstMS = js.Global().Get("performance").Call("now").Float()
	} else {
		p.drawTime = append(p.drawTime, float64(now.Sub(p.last).Microseconds())/1000)
		if len(p.drawTime) > 600 {
			p.drawTime = p.drawTime[len(p.drawTime)-600:]
		}
	}
	p.last = now
	p.frames++
}

// export installs globalThis.broadsideViewer.
func (p *page) export(g *ebitenview.Game) {
	obj := js.Global().Get("Object").New()
	obj.Set("state", js.FuncOf(func(js.Value, []js.Value) any {
		p.mu.Lock()
		defer p.mu.Unlock()
		return string(p.state)
	}))
	obj.Set("frames", js.FuncOf(func(js.Value, []js.Value) any {
		p.mu.Lock()
		defer p.mu.Unlock()
		return float64(p.frames)
	}))
	// stats: frames drawn, ms from the page's navigation to the first frame, and
	// the frame intervals (ms) since the last call.
	obj.Set("stats", js.FuncOf(func(js.Value, []js.Value) any {
		p.mu.Lock()
		defer p.mu.Unlock()
		b, _ := json.Marshal(struct {
			Frames    uint64    `json:"frames"`
			FirstMS   float64   `json:"first_frame_ms"`
			Intervals []float64 `json:"intervals_ms"`
		}{p.frames, p.firstMS, p.drawTime})
		p.drawTime = nil
		return string(b)
	}))
	obj.Set("seek", js.FuncOf(func(_ js.Value, args []js.Value) any {
		if len(args) > 0 {
			t := uint64(args[0].Float())
			g.Post(func(m *viewer.Model) { m.SeekTo(t) })
		}
		return nil
	}))
	obj.Set("select", js.FuncOf(func(_ js.Value, args []js.Value) any {
		if len(args) > 0 {
			pl := uint32(args[0].Int())
			g.Post(func(m *viewer.Model) { m.SelectPlayer(pl) })
		}
		return nil
	}))
	obj.Set("key", js.FuncOf(func(_ js.Value, args []js.Value) any {
		if len(args) > 0 {
			if k, ok := keys[args[0].String()]; ok {
				g.Post(func(m *viewer.Model) { m.Key(k) })
			}
		}
		return nil
	}))
	js.Global().Set("broadsideViewer", obj)
}
