//go:build browser

package main

// The browser tests (make browser): the WebAssembly viewer (make
// viewer-wasm builds it into bin/web) in headless Chromium (Debian's
// chromium package, WebGL through SwiftShader), driven with chromedp.
//
//   - TestBrowser/recording opens the viewer on a recording, scrubs the
//     timeline with the mouse to a tick where a ship has just sunk, clicks
//     that ship, and checks the Why panel's text against 'broadside lineage
//     why --recording' for that ship and tick.
//   - TestBrowser/live watches a live world (a real game server on
//     loopback with a spectator delay) through 'broadside view's WebSocket
//     relay for 5 s: the ticks advance and never come closer to the
//     world's newest tick than the delay.
//   - TestBrowserPerf (with -browser.perf FILE.bsr) measures the time to
//     the first frame and the frame rate while scrubbing.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/demo/viewer"
	"github.com/anoptic/broadside/demo/viewer/web"
	"github.com/anoptic/broadside/demo/viewer/web/livetest"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay/bsr"
)

var (
	browserWeb   = flag.String("browser.web", "../../bin/web", "the built viewer (make viewer-wasm)")
	browserShots = flag.String("browser.shots", "", "write the screenshots into this directory (default: a temporary one)")
	browserExec  = flag.String("browser.chromium", "", "the Chromium binary (default: chromium on PATH)")
	browserPerf  = flag.String("browser.perf", "", "TestBrowserPerf: measure on this recording (a 60-minute match)")
)

const screenW, screenH = 1280, 800

// startBrowser starts headless Chromium with WebGL on SwiftShader.
func startBrowser(t *testing.T) (context.Context, context.CancelFunc) {
	t.Helper()
	path := *browserExec
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		t.Fatal("no chromium on PATH (scripts/deps.sh installs Debian's chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(screenW, screenH),
		chromedp.Flag("use-angle", "swiftshader"), chromedp.Flag("enable-unsafe-swiftshader", true),
		chromedp.Flag("ignore-gpu-blocklist", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	if _, err := chromedp.Run(ctx, chromedp.Steps()); err != nil {
		cancel()
		acancel()
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx, func() { cancel(); acancel() }
}

// openPage opens url in a new tab of the browser, sized screenW×screenH
// at one device pixel per CSS pixel, logging the page's console.
func openPage(t *testing.T, browser context.Context, url string) (context.Context, context.CancelFunc) {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, strings.Trim(string(a.Value), `"`))
			}
			t.Logf("console: %s", strings.Join(parts, " "))
		case *runtime.EventExceptionThrown:
			t.Logf("page exception: %s", ev.ExceptionDetails.Text)
		}
	})
	if _, err := chromedp.Run(ctx, chromedp.Steps(chromedp.EmulateViewport(screenW, screenH), chromedp.Navigate(url))); err != nil {
		cancel()
		t.Fatal(err)
	}
	return ctx, cancel
}

func pageState(ctx context.Context) (viewer.State, bool, error) {
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.broadsideViewer ? broadsideViewer.state() : ""`))
	if err != nil {
		return viewer.State{}, false, err
	}
	if s == "" {
		return viewer.State{}, false, nil
	}
	var st viewer.State
	err = json.Unmarshal([]byte(s), &st)
	return st, err == nil, err
}

// waitState polls the viewer's state until cond holds.
func waitState(t *testing.T, ctx context.Context, what string, timeout time.Duration, cond func(viewer.State) bool) viewer.State {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last viewer.State
	for time.Now().Before(deadline) {
		st, ok, err := pageState(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			last = st
			if cond(st) {
				return st
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById("status")||{}).textContent||""`))
	t.Fatalf("%s: not within %v (page status %q; last state: tick %d of %d..%d, selected %q, verify %q, err %q, panel %q)",
		what, timeout, status, last.Tick, last.First, last.Last, last.Selected, last.Verify, last.Err, last.Panel)
	return last
}

func frames(t *testing.T, ctx context.Context) float64 {
	n, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`broadsideViewer.frames()`))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// nextFrames waits until n more frames are drawn: Ebitengine reads input
// once per frame, so a press and its release must be frames apart.
func nextFrames(t *testing.T, ctx context.Context, n float64) {
	t.Helper()
	start := frames(t, ctx)
	deadline := time.Now().Add(20 * time.Second)
	for frames(t, ctx) < start+n {
		if time.Now().After(deadline) {
			t.Fatal("the viewer stopped drawing frames")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mouse(t *testing.T, ctx context.Context, typ input.DispatchMouseEventType, x, y float64, buttons int64) {
	t.Helper()
	opt := func(p *input.DispatchMouseEventParams) {
		p.Buttons = buttons
		if typ != chromedp.MouseMoved {
			p.Button, p.ClickCount = input.MouseButtonLeft, 1
		}
	}
	if _, err := chromedp.Run(ctx, chromedp.MouseEvent(typ, x, y, opt)); err != nil {
		t.Fatal(err)
	}
	nextFrames(t, ctx, 2)
}

// pressKey presses and releases a key, frames apart (Ebitengine polls
// the keyboard once per frame).
func pressKey(t *testing.T, ctx context.Context, key, code string, vk int64) {
	t.Helper()
	for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeKeyDown, input.DispatchKeyEventTypeKeyUp} {
		p := input.DispatchKeyEventParams{Type: typ, Key: key, Code: code, WindowsVirtualKeyCode: vk, NativeVirtualKeyCode: vk}
		if typ == input.DispatchKeyEventTypeKeyDown {
			p.Text = key
		}
		if _, err := chromedp.Run(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, p)
			return err
		})); err != nil {
			t.Fatal(err)
		}
		nextFrames(t, ctx, 2)
	}
}

// click clicks at (x, y) as a user does: move there, press, release.
func click(t *testing.T, ctx context.Context, x, y float64) {
	mouse(t, ctx, chromedp.MouseMoved, x, y, 0)
	mouse(t, ctx, chromedp.MousePressed, x, y, 1)
	mouse(t, ctx, chromedp.MouseReleased, x, y, 0)
}

// scrub drags the timeline's knob from the first tick to tick.
func scrub(t *testing.T, ctx context.Context, st viewer.State, tick uint64) viewer.State {
	t.Helper()
	xOf := func(tick uint64) float64 {
		return st.Track.X0 + (st.Track.X1-st.Track.X0)*float64(tick-st.First)/float64(st.Last-st.First)
	}
	y := st.Track.Y
	mouse(t, ctx, chromedp.MouseMoved, xOf(st.First), y, 0)
	mouse(t, ctx, chromedp.MousePressed, xOf(st.First), y, 1)
	const steps = 8
	for i := 1; i <= steps; i++ {
		mouse(t, ctx, chromedp.MouseMoved, xOf(st.First+(tick-st.First)*uint64(i)/steps), y, 1)
	}
	mouse(t, ctx, chromedp.MouseReleased, xOf(tick), y, 0)
	return waitState(t, ctx, "scrub", 20*time.Second, func(s viewer.State) bool { return !s.Playing && s.Tick != st.First })
}

func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	dir := *browserShots
	if dir == "" {
		dir = t.TempDir()
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// lineageWhy runs 'broadside lineage why --recording FILE --json' as the
// CLI does.
func lineageWhy(t *testing.T, rec, entity string, tick uint64) lineage.WhyView {
	t.Helper()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"lineage", "why", "--recording", rec, "--entity", entity, "--tick", fmt.Sprint(tick),
		"--depth", fmt.Sprint(viewer.WhyDepth), "--limit", "0", "--json"})
	if err := root.Execute(); err != nil {
		t.Fatalf("lineage why: %v: %s", err, errOut.String())
	}
	var v lineage.WhyView
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("lineage why --json: %v: %s", err, out.String())
	}
	return v
}

var (
	summaryLine = regexp.MustCompile(`^(\d+) commands from (\d+) players; chain of (\d+) entities, (\d+) derivations$`)
	moreLine    = regexp.MustCompile(`^  \.\.\. (\d+) more commands$`)
	killLine    = regexp.MustCompile(`^  (ship:\d+) \(fire order t(\d+) pos (\d+)\) -fired t(\d+)-> (ball:[0-9.]+) -hit t(\d+)-> (ship:\d+)$`)
)

// checkPanel compares the Why panel's lines with lineage why's answer:
// the question, the counts, every command listed (in order, nearest
// first), how many are left out, and the killing blow's chain.
func checkPanel(t *testing.T, panel []string, v lineage.WhyView) (commands int) {
	t.Helper()
	if want := fmt.Sprintf("Why is %s as it is at tick %d?", v.Entity, v.Tick); !slices.Contains(panel, want) {
		t.Fatalf("panel lacks %q:\n%s", want, strings.Join(panel, "\n"))
	}
	players := map[uint32]bool{}
	for _, c := range v.Causes {
		players[c.Player] = true
	}
	ents := map[string]bool{}
	for _, l := range v.Chain {
		ents[l.Entity] = true
	}
	wantSummary := fmt.Sprintf("%d commands from %d players; chain of %d entities, %d derivations", v.Commands, len(players), len(ents), len(v.Chain)-1)
	heading := -1
	summary := false
	for i, l := range panel {
		if summaryLine.MatchString(l) {
			if l != wantSummary {
				t.Fatalf("panel says %q, lineage why %q", l, wantSummary)
			}
			summary = true
		}
		if strings.HasPrefix(l, "Commands, nearest first") {
			heading = i
		}
		if m := killLine.FindStringSubmatch(l); m != nil {
			var pos, fired uint64
			fmt.Sscan(m[3], &pos)
			fmt.Sscan(m[4], &fired)
			found := false
			for _, c := range v.Causes {
				if c.Pos == pos && c.Kind == "fire" && c.Entity == m[1] {
					found = true
				}
			}
			if !found {
				t.Fatalf("the killing blow's fire order (pos %d of %s) is not among lineage why's commands", pos, m[1])
			}
			ball := false
			for _, l := range v.Chain {
				ball = ball || l.Entity == m[5]
			}
			if !ball || m[7] != v.Entity {
				t.Fatalf("killing chain %q: ball not on lineage why's chain", l)
			}
		}
	}
	if !summary || heading < 0 {
		t.Fatalf("panel has no summary or no command list:\n%s", strings.Join(panel, "\n"))
	}
	k := 0
	for _, l := range panel[heading+1:] {
		if m := moreLine.FindStringSubmatch(l); m != nil {
			var n int
			fmt.Sscan(m[1], &n)
			if k+n != v.Commands {
				t.Fatalf("panel lists %d commands and %d more, lineage why %d", k, n, v.Commands)
			}
			return k
		}
		if k >= len(v.Causes) {
			t.Fatalf("panel lists more commands than lineage why's %d: %q", len(v.Causes), l)
		}
		c := v.Causes[k]
		who := fmt.Sprintf("player %d", c.Player)
		if c.Player == 0 {
			who = "engine"
		}
		if want := fmt.Sprintf("  t%-5d %-10s %-9s -> %s", c.Tick, who, c.Kind, c.Entity); l != want {
			t.Fatalf("command %d: panel %q, lineage why %q", k, l, want)
		}
		k++
	}
	if k != v.Commands {
		t.Fatalf("panel lists %d commands, lineage why %d", k, v.Commands)
	}
	return k
}

func TestBrowser(t *testing.T) {
	browser, stop := startBrowser(t)
	defer stop()
	var whyOK bool
	var liveTicks uint64
	var liveDelay float64

	t.Run("recording", func(t *testing.T) {
		ctx := context.Background()
		m, err := viewer.PlayMatch(ctx, viewer.MatchOptions{Seed: 3, Ships: 24, Ticks: 900})
		if err != nil {
			t.Fatal(err)
		}
		rec := filepath.Join(t.TempDir(), "match.bsr")
		if _, err := m.WriteRecording(ctx, rec, bsr.SnapshotPolicy{}); err != nil {
			t.Fatal(err)
		}
		h, err := web.New(web.Options{WasmDir: *browserWeb, Recordings: map[string]string{"match.bsr": rec}})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(h)
		defer ts.Close()
		page, closePage := openPage(t, browser, ts.URL+"/")
		defer closePage()
		st := waitState(t, page, "the recording opens", 90*time.Second, func(s viewer.State) bool { return s.Last == 900 })
		st = waitState(t, page, "the hashes verify", 120*time.Second, func(s viewer.State) bool { return s.Verify != "verifying" })
		if st.Verify != "verified" {
			t.Fatalf("verification in the browser: %q %s", st.Verify, st.VerifyDetail)
		}
		if !strings.Contains(st.Status, "hashes verified") {
			t.Fatalf("status bar %q does not say the hashes verified", st.Status)
		}
		// Ships sunk in the match, latest first: scrub to just after one
		// sank, where its ship can be clicked.
		sinkings := m.Sinkings()
		slices.Reverse(sinkings)
		var v lineage.WhyView
		var target viewer.ShipState
		for _, sk := range sinkings {
			if sk.Tick+5 > st.Last || sk.Tick < st.First+60 {
				continue
			}
			st = scrub(t, page, st, sk.Tick+3)
			name := broadside.EntityName(broadside.ShipID(sk.Player))
			found := false
			for _, s := range st.Ships {
				if s.Name == name && s.Sunk && s.OnScreen {
					target, found = s, true
				}
			}
			if !found {
				continue
			}
			for _, s := range st.Ships { // another ship centred on it would take the click
				if s.Name != name && math.Hypot(s.X-target.X, s.Y-target.Y) < 4 {
					found = false
				}
			}
			if found {
				break
			}
		}
		if target.Name == "" {
			t.Fatal("no sunk ship to click at any scrubbed tick")
		}
		tick := st.Tick
		click(t, page, target.X, target.Y)
		st = waitState(t, page, "the Why panel", 30*time.Second, func(s viewer.State) bool {
			return s.Selected == target.Name && len(s.Panel) > 2
		})
		if st.Tick != tick {
			t.Fatalf("the click moved the viewer from tick %d to %d", tick, st.Tick)
		}
		v = lineageWhy(t, rec, target.Name, tick)
		if v.Commands == 0 {
			t.Fatalf("lineage why finds no commands for %s at %d", target.Name, tick)
		}
		n := checkPanel(t, st.Panel, v)
		if !slices.ContainsFunc(st.Panel, func(l string) bool { return strings.HasPrefix(l, "SUNK at tick") }) {
			t.Fatalf("the panel of a sunk ship does not say it sank:\n%s", strings.Join(st.Panel, "\n"))
		}
		p := screenshot(t, page, "browser-why.png")
		// C (a real key press) follows the selected ship: the camera keeps
		// it in the middle of the sea the panel leaves free.
		pressKey(t, page, "c", "KeyC", 'C')
		st = waitState(t, page, "following the ship", 20*time.Second, func(s viewer.State) bool { return s.FollowShip })
		centred := false
		for _, s := range st.Ships {
			if s.Name == target.Name {
				// The panel is 480 px wide; the sea's viewport spans the
				// screen between the status bar and the timeline.
				cx, cy := float64(screenW-480)/2, float64(22+(screenH-40))/2
				centred = math.Hypot(s.X-cx, s.Y-cy) < 1.5
				if !centred {
					t.Fatalf("followed ship drawn at (%.1f, %.1f), want (%.1f, %.1f)", s.X, s.Y, cx, cy)
				}
			}
		}
		if !centred {
			t.Fatalf("%s not in the frame after C", target.Name)
		}
		t.Logf("%s at tick %d: panel lists %d of %d commands, as lineage why does; screenshot %s", target.Name, tick, n, v.Commands, p)
		whyOK = true
	})

	t.Run("picked-file", func(t *testing.T) {
		// No recording named: the page offers a file picker, and opens
		// the file the user picks (read in the page, not uploaded).
		ctx := context.Background()
		m, err := viewer.PlayMatch(ctx, viewer.MatchOptions{Seed: 4, Ships: 8, Ticks: 200})
		if err != nil {
			t.Fatal(err)
		}
		rec := filepath.Join(t.TempDir(), "picked.bsr")
		if _, err := m.WriteRecording(ctx, rec, bsr.SnapshotPolicy{}); err != nil {
			t.Fatal(err)
		}
		h, err := web.New(web.Options{WasmDir: *browserWeb})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(h)
		defer ts.Close()
		page, closePage := openPage(t, browser, ts.URL+"/")
		defer closePage()
		if _, err := chromedp.Run(page, chromedp.Steps(chromedp.WaitVisible("#file"), chromedp.SetUploadFiles("#file", []string{rec}))); err != nil {
			t.Fatal(err)
		}
		st := waitState(t, page, "the picked recording opens and verifies", 90*time.Second, func(s viewer.State) bool {
			return s.Last == 200 && s.Verify == "verified"
		})
		if !strings.Contains(st.Status, "picked.bsr") {
			t.Fatalf("status %q does not name the file picked", st.Status)
		}
	})

	t.Run("live", func(t *testing.T) {
		const delay = 2 * broadside.TickRate
		w, err := livetest.Start(livetest.Options{Delay: delay, Ships: 16})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		h, err := web.New(web.Options{WasmDir: *browserWeb, Live: &web.LiveOptions{Addr: w.Server.Addr(), TLS: w.ClientTLS,
			Token: web.SpectatorTokens(w.Secret, time.Hour)}})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(h)
		defer ts.Close()
		page, closePage := openPage(t, browser, ts.URL+"/")
		defer closePage()
		st := waitState(t, page, "the live feed opens", 90*time.Second, func(s viewer.State) bool { return s.Live && s.Last > 0 })
		start := st.Last
		minLag := uint64(math.MaxUint64)
		end := time.Now().Add(5 * time.Second)
		samples := 0
		for time.Now().Before(end) {
			// The world's tick is read after the page's state, so it is at
			// least as new: the lag measured is never smaller than the real.
			s, ok, err := pageState(page)
			now := w.Tick()
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				samples++
				st = s
				if now < s.Last+delay {
					t.Fatalf("the page shows tick %d while the world is at %d: closer than the %d-tick delay", s.Last, now, delay)
				}
				minLag = min(minLag, now-s.Last)
				if !s.Following || s.Tick+5 < s.Last {
					t.Fatalf("a live viewer follows the newest tick: shows %d of %d (following %v)", s.Tick, s.Last, s.Following)
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		liveTicks = st.Last - start
		if liveTicks < 5*broadside.TickRate/2 {
			t.Fatalf("in 5 s the page advanced %d ticks (%d..%d)", liveTicks, start, st.Last)
		}
		liveDelay = float64(minLag) / broadside.TickRate
		p := screenshot(t, page, "browser-live.png")
		t.Logf("live: %d samples, ticks %d..%d, least lag %d ticks (delay %d); screenshot %s", samples, start, st.Last, minLag, delay, p)
	})
	if whyOK && liveTicks > 0 && !t.Failed() {
		fmt.Printf("browser: viewer ok (why panel matches lineage), live spectator ok (%d ticks, delay %.1f s)\n", liveTicks, liveDelay)
	}
}

// TestBrowserPerf measures the viewer on -browser.perf's recording: the
// .wasm's size gzipped, the time from navigation to the first frame, and
// the frame rate while the timeline is dragged back and forth (each frame
// a seek: snapshots restored, the log replayed).
func TestBrowserPerf(t *testing.T) {
	if *browserPerf == "" {
		t.Skip("give -browser.perf FILE.bsr")
	}
	browser, stop := startBrowser(t)
	defer stop()
	h, err := web.New(web.Options{WasmDir: *browserWeb, Recordings: map[string]string{"match.bsr": *browserPerf}})
	if err != nil {
		t.Fatal(err)
	}
	raw, gz := h.WasmSize()
	ts := httptest.NewServer(h)
	defer ts.Close()
	page, closePage := openPage(t, browser, ts.URL+"/")
	defer closePage()
	st := waitState(t, page, "the recording opens", 5*time.Minute, func(s viewer.State) bool { return s.Last > 0 })
	var stats struct {
		Frames    float64   `json:"frames"`
		FirstMS   float64   `json:"first_frame_ms"`
		Intervals []float64 `json:"intervals_ms"`
	}
	xOf := func(f float64) float64 { return st.Track.X0 + (st.Track.X1-st.Track.X0)*f }
	readStats := func() {
		s, err := chromedp.Run(page, chromedp.Evaluate[string](`broadsideViewer.stats()`))
		if err != nil {
			t.Fatal(err)
		}
		stats.Intervals = nil // a fresh slice: earlier phases keep theirs
		if err := json.Unmarshal([]byte(s), &stats); err != nil {
			t.Fatal(err)
		}
	}
	readStats()
	first := stats.FirstMS
	// Frames while the recording verifies in the background (from the
	// first frame until the page says verified), then idle, then
	// scrubbing: the knob dragged across the whole match and back for
	// 10 s, one mouse move per frame.
	verifyStart := time.Now()
	st = waitState(t, page, "the hashes verify", 10*time.Minute, func(s viewer.State) bool { return s.Verify != "verifying" })
	verifyTook := time.Since(verifyStart)
	if st.Verify != "verified" {
		t.Fatalf("verification: %q %s", st.Verify, st.VerifyDetail)
	}
	readStats()
	idleVerifying := stats.Intervals
	readStats()
	time.Sleep(3 * time.Second)
	readStats()
	idle := stats.Intervals
	mouse(t, page, chromedp.MouseMoved, xOf(0), st.Track.Y, 0)
	mouse(t, page, chromedp.MousePressed, xOf(0), st.Track.Y, 1)
	readStats()
	end := time.Now().Add(10 * time.Second)
	seen := map[uint64]bool{}
	k := 0
	for ; time.Now().Before(end); k++ {
		f := math.Abs(math.Mod(float64(k)*0.013, 2) - 1) // a triangle wave over the track
		if _, err := chromedp.Run(page, chromedp.MouseEvent(chromedp.MouseMoved, xOf(1-f), st.Track.Y,
			func(p *input.DispatchMouseEventParams) { p.Buttons = 1 })); err != nil {
			t.Fatal(err)
		}
		nextFrames(t, page, 1)
		if s, ok, _ := pageState(page); ok {
			seen[s.Tick] = true
		}
	}
	readStats()
	scrubbing := stats.Intervals
	mouse(t, page, chromedp.MouseReleased, xOf(0.5), st.Track.Y, 0)
	fps := func(iv []float64) (median, p10 float64) {
		if len(iv) == 0 {
			return 0, 0
		}
		s := slices.Clone(iv)
		slices.Sort(s)
		return 1000 / s[len(s)/2], 1000 / s[len(s)*9/10]
	}
	vm, _ := fps(idleVerifying)
	im, _ := fps(idle)
	sm, s10 := fps(scrubbing)
	if len(seen) < k/2 {
		t.Fatalf("scrubbing showed only %d distinct ticks in %d moves", len(seen), k)
	}
	fmt.Printf("browser-perf: viewer.wasm %.1f MB (%.1f MB gzipped); first frame %.1f s after navigation; %d ticks (%.0f min), verified in the background %.1f s after the first frame; %.1f fps while verifying, %.1f fps after; scrubbing %.1f fps median, %.1f fps at the 10th percentile (%d frames, %d distinct ticks shown)\n",
		float64(raw)/1e6, float64(gz)/1e6, first/1000, st.Last, float64(st.Last)/broadside.TickRate/60, verifyTook.Seconds(), vm, im, sm, s10, len(scrubbing), len(seen))
}
