//go:build cgo

// Command broadside-viewer replays Broadside matches in a window: a .bsr
// recording, a live server followed as a spectator, or a bot match played
// in memory. Click a ship to see why it is as it is (its lineage); press H
// for the keyboard shortcuts.
//
// It needs cgo and a display (X11 with OpenGL; Xvfb works). The model it
// shows lives in demo/viewer; this command only opens the source and the
// window.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hajimehoshi/ebiten/v2"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/demo/viewer"
	"github.com/anoptic/broadside/demo/viewer/ebitenview"
	"github.com/anoptic/broadside/internal/adminauth"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/replay/bsr"
)

// options are the command line's.
type options struct {
	file       string
	fork       string
	live       string
	demo       bool
	saveDemo   string
	seed       uint64
	ships      int
	ticks      int
	width      int
	height     int
	tick       int64
	selectShip uint
	play       bool
	speed      float64
	help       bool
	screenshot string

	// --live
	caFile    string
	token     string
	tokenFile string
	worldSeed uint64
	admin     string
	adminTok  string
	// worldFixed: a world flag was given, so it overrides the world the
	// server describes in its Welcome.
	worldFixed bool
	worldSize  int
	sectors    int
	islands    int
}

const usage = `usage: broadside-viewer [flags] FILE.bsr
       broadside-viewer [flags] --live HOST:PORT --token TOKEN [--ca ca.pem]
       broadside-viewer [flags] --demo [--save FILE.bsr]

Replays a Broadside match: a .bsr recording (its hashes are verified in the
background; a red band says when they do not verify), a live server followed
as a spectator, or (--demo) a bot match played in memory. Click a ship for
its Why lineage; press H for the keyboard shortcuts.

flags:
`

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("broadside-viewer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.fork, "fork", "", "show FILE's what-if fork `FORK` beside it ('broadside replay fork'); Tab switches between the two")
	fs.StringVar(&o.live, "live", "", "follow the live server at `ADDR` as a spectator")
	fs.BoolVar(&o.demo, "demo", false, "play a bot match in memory and show it")
	fs.Uint64Var(&o.seed, "seed", 3, "--demo: world and bot seed")
	fs.IntVar(&o.ships, "ships", 32, "--demo: ships (one bot each)")
	fs.IntVar(&o.ticks, "ticks", 1800, "--demo: ticks to play (30 per second)")
	fs.StringVar(&o.saveDemo, "save", "", "--demo: record the match as the .bsr `FILE` and show the recording")
	fs.IntVar(&o.width, "width", 1280, "window width in pixels")
	fs.IntVar(&o.height, "height", 800, "window height in pixels")
	fs.Int64Var(&o.tick, "tick", -1, "start at this tick (-1: the first)")
	fs.UintVar(&o.selectShip, "select", 0, "select player `P`'s ship at the start")
	fs.BoolVar(&o.play, "play", false, "start playing")
	fs.Float64Var(&o.speed, "speed", 1, "playback speed, 0.25 to 16")
	fs.BoolVar(&o.help, "show-help", false, "start with the help overlay shown")
	fs.StringVar(&o.screenshot, "screenshot", "", "draw one frame, save it as the PNG `FILE` and exit")
	fs.StringVar(&o.caFile, "ca", "broadside-dev/tls/ca.pem", "--live: CA certificate `FILE` to trust (a dev server's ca.pem)")
	fs.StringVar(&o.token, "token", "", "--live: the spectator's token ('broadside token --player NAME')")
	fs.StringVar(&o.admin, "admin", "", "--live: the server's admin address (serve --admin-addr, e.g. 127.0.0.1:9090), to ask it why")
	fs.StringVar(&o.adminTok, "admin-token-file", "", "--live with --admin: the server's admin bearer token `FILE` (serve --admin-token-file)")
	fs.StringVar(&o.tokenFile, "token-file", "", "--live: read the token from `FILE`")
	fs.Uint64Var(&o.worldSeed, "world-seed", 1, "--live: the server's world seed (broadside serve --seed); the world flags are needed only for servers that do not describe their world")
	fs.IntVar(&o.worldSize, "world-size", 4000, "--live: the server's sea size in metres (broadside serve --world-size)")
	fs.IntVar(&o.sectors, "sectors", 2, "--live: the server's sectors per side (broadside serve --sectors)")
	fs.IntVar(&o.islands, "islands", 12, "--live: the server's islands (broadside serve --islands)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "world-seed", "world-size", "sectors", "islands":
			o.worldFixed = true
		}
	})
	switch fs.NArg() {
	case 0:
	case 1:
		o.file = fs.Arg(0)
	default:
		fs.Usage()
		return o, errors.New("one recording at a time")
	}
	n := 0
	for _, set := range []bool{o.file != "", o.live != "", o.demo} {
		if set {
			n++
		}
	}
	if n != 1 {
		fs.Usage()
		return o, errors.New("give a FILE.bsr, --live ADDR or --demo")
	}
	if o.saveDemo != "" && !o.demo {
		return o, errors.New("--save goes with --demo")
	}
	if o.speed < viewer.Speeds[0] || o.speed > viewer.Speeds[len(viewer.Speeds)-1] {
		return o, fmt.Errorf("--speed %g out of [%g, %g]", o.speed, viewer.Speeds[0], viewer.Speeds[len(viewer.Speeds)-1])
	}
	return o, nil
}

// openSource opens what o names.
func openSource(ctx context.Context, o options) (viewer.Source, error) {
	switch {
	case o.demo:
		m, err := viewer.PlayMatch(ctx, viewer.MatchOptions{Seed: o.seed, Ships: o.ships, Ticks: o.ticks,
			Title: fmt.Sprintf("demo: %d bots, seed %d", o.ships, o.seed)})
		if err != nil {
			return nil, err
		}
		if o.saveDemo == "" {
			return m, nil
		}
		if _, err := m.WriteRecording(ctx, o.saveDemo, bsr.SnapshotPolicy{}); err != nil {
			return nil, err
		}
		r, err := viewer.OpenRecording(ctx, o.saveDemo)
		if err != nil {
			return nil, err
		}
		return r, nil
	case o.live != "":
		return dialLive(ctx, o)
	default:
		r, err := viewer.OpenRecording(ctx, o.file)
		if err != nil {
			return nil, err
		}
		if o.fork == "" {
			return r, nil
		}
		f, err := viewer.OpenRecording(ctx, o.fork)
		if err != nil {
			r.Close()
			return nil, err
		}
		return viewer.NewForkPair(r, f), nil
	}
}

func dialLive(ctx context.Context, o options) (viewer.Source, error) {
	token := o.token
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return nil, err
		}
		token = strings.TrimSpace(string(b))
	}
	tlsConf, err := transport.ClientTLS(o.caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca: %w", err)
	}
	cfg := broadside.Config{Seed: o.worldSeed, Width: int32(o.worldSize), Height: int32(o.worldSize),
		SectorsX: o.sectors, SectorsY: o.sectors, Islands: o.islands}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var adminToken []byte
	if o.adminTok != "" {
		if adminToken, err = adminauth.ReadToken(o.adminTok); err != nil {
			return nil, err
		}
	}
	l, err := viewer.DialLive(dctx, viewer.LiveOptions{Addr: o.live, TLS: tlsConf, Token: token, Config: cfg, Fixed: o.worldFixed,
		Lineage: o.admin, LineageToken: string(adminToken)})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// setUp applies o's starting state to m.
func setUp(m *viewer.Model, o options) error {
	if o.tick >= 0 {
		m.SeekTo(uint64(o.tick))
	}
	for m.Speed() < o.speed {
		m.Key(viewer.KeyFaster)
	}
	for m.Speed() > o.speed {
		m.Key(viewer.KeySlower)
	}
	if o.selectShip != 0 {
		id := broadside.ShipID(uint32(o.selectShip))
		if _, ok := m.Source().Frame().Ship(id); !ok {
			return fmt.Errorf("--select %d: no such ship at tick %d", o.selectShip, m.Tick())
		}
		m.Select(id)
	}
	if o.play && !m.Playing() {
		m.Key(viewer.KeyPlayPause)
	}
	if o.help {
		m.Key(viewer.KeyHelp)
	}
	return m.Err()
}

func savePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func run(args []string) error {
	o, err := parseFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src, err := openSource(ctx, o)
	if err != nil {
		return err
	}
	defer src.Close()
	m := viewer.NewModel(src, o.width, o.height)
	if err := setUp(m, o); err != nil {
		return err
	}
	g := ebitenview.New(m)
	title := "Broadside viewer: " + src.World().Title
	ebiten.SetWindowTitle(title)
	ebiten.SetWindowSize(o.width, o.height)
	ebiten.SetWindowResizingMode(ebiten.WindowResizingModeEnabled)
	var shotErr error
	if o.screenshot != "" {
		go func() {
			defer g.Stop()
			// A few frames first, so that the window has its final size.
			for i := 0; i < 3; i++ {
				g.Do(func(*viewer.Model) {})
			}
			if shot := g.Screenshot(); shot.Image != nil {
				shotErr = savePNG(o.screenshot, shot.Image)
			}
		}()
	}
	if err := ebiten.RunGame(g); err != nil {
		return err
	}
	return shotErr
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "broadside-viewer:", err)
		os.Exit(1)
	}
}
