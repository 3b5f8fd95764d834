package natsworld

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
	"github.com/anoptic/broadside/replay/world"
)

// framePublisher records the frames and takeover reports of every worker
// of a test, and forwards them to NATS if nc is set (a front end's).
type framePublisher struct {
	mu        sync.Mutex
	frames    []SectorFrame
	takeovers []TakeoverReport
	latest    map[uint32]uint64
	nc        *nats.Conn
}

func (p *framePublisher) Publish(subject string, data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nc != nil {
		_ = p.nc.Publish(subject, data)
	}
	if f, err := DecodeSectorFrame(data); err == nil {
		f.Payload = nil
		p.frames = append(p.frames, f)
		p.latest[f.Sector] = max(p.latest[f.Sector], f.Tick)
		return nil
	}
	r, err := DecodeTakeoverReport(data)
	if err != nil {
		return err
	}
	p.takeovers = append(p.takeovers, r)
	return nil
}

func (p *framePublisher) minTick(sectors int) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var m uint64
	for s := range uint32(sectors) {
		if s == 0 || p.latest[s] < m {
			m = p.latest[s]
		}
	}
	return m
}

// TestWorkersRebalanceAndTakeOver runs a world's 4 sectors on sector
// workers in one process (an embedded NATS, an in-process log): one
// worker alone (holding the Ticker lease too), a second joining (the
// sectors rebalance: handed over, restored from the shared snapshot store
// and the log; the second keeps hot copies of the others), then the first losing its NATS connection as a crash
// would (its leases lapse; the second takes everything over). Every frame
// either published must equal an uninterrupted re-simulation of the log,
// and every sector must reach the end. A front end node follows the
// frames throughout: the hashes it publishes (/world/hashes) and the
// lineage queries it answers from the shared store must equal the
// re-simulation's.
func TestWorkersRebalanceAndTakeOver(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a world for seconds")
	}
	e, err := natscoord.StartEmbedded(natscoord.EmbeddedOptions{StoreDir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	lc, err := cmdlog.StartLocal(context.Background(), cmdlog.LocalConfig{
		Coordinator: coord.NewMemory(), Network: node.NewLocalNet(),
		NewStorage: func(msg.NodeID) (shard.Storage, error) { return shardstore.NewMemory(), nil },
		Timing:     node.Timing{Tick: 2 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	game, err := broadside.NewGame(broadside.Config{Seed: 3, Width: 4000, Height: 4000, SectorsX: 2, SectorsY: 2, Islands: 6}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pubConn, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer pubConn.Close()
	pub := &framePublisher{latest: map[uint32]uint64{}, nc: pubConn}
	feConn, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer feConn.Close()
	feFrames := world.NewFrames(game.Shards, func(tick uint64) world.Frame { return &partFrame{tick: tick, parts: map[uint32]string{}} })
	fe, err := StartFrontEndNode(ctx, FrontEndNodeConfig{World: 1, Sectors: game.Shards, Frames: feFrames, Conn: feConn, Logger: quiet(), Lineage: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fe.Stop()
	type running struct {
		cancel context.CancelFunc
		done   chan error
		nc     interface{ Close() }
		log    *cmdlog.Client
	}
	start := func(id string, standby bool) running {
		nc, err := e.Connect()
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		leases, err := OpenLeases(ctx, js, LeasesConfig{World: 1, Worker: id, TTL: testTTL})
		if err != nil {
			t.Fatal(err)
		}
		snaps, err := OpenSnapshotStore(ctx, js, SnapshotStoreConfig{World: 1})
		if err != nil {
			t.Fatal(err)
		}
		lin, err := OpenLineageStore(ctx, js, LineageStoreConfig{World: 1, KindNames: game.KindNames})
		if err != nil {
			t.Fatal(err)
		}
		logc := lc.NewClient(cmdlog.ClientConfig{})
		w, err := NewWorker(WorkerConfig{World: 1, Game: game, Log: logc, Leases: leases, Snapshots: snaps, Lineage: lin, Publisher: pub,
			Ticker: true, Standby: standby, Logger: quiet(), Policy: snapshot.Policy{MinInterval: 5}})
		if err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithCancel(ctx)
		r := running{cancel: wcancel, done: make(chan error, 1), nc: nc, log: logc}
		go func() { r.done <- w.Run(wctx) }()
		return r
	}
	stop := func(r running) {
		r.cancel()
		if err := <-r.done; !errors.Is(err, context.Canceled) {
			t.Errorf("worker: %v", err)
		}
		r.nc.Close()
		r.log.Close()
	}
	waitTicks := func(n uint64, what string) {
		t.Helper()
		target := pub.minTick(game.Shards) + n
		for pub.minTick(game.Shards) < target {
			if ctx.Err() != nil {
				pub.mu.Lock()
				at := fmt.Sprint(pub.latest)
				pub.mu.Unlock()
				t.Fatalf("after %s: sectors at %s, waiting for tick %d", what, at, target)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Player commands, so that ships move (and migrate).
	cmds := lc.NewClient(cmdlog.ClientConfig{})
	defer cmds.Close()
	for p := uint32(1); p <= 8; p++ {
		for seq, c := range []broadside.PlayerCommand{broadside.Join(), broadside.Throttle(100), broadside.Rudder(int8(p) * 5)} {
			rec, err := broadside.CommandRecord(p, uint64(seq+1), c)
			if err != nil {
				t.Fatal(err)
			}
			if err := cmds.Append(ctx, rec); err != nil {
				t.Fatal(err)
			}
		}
	}

	w1 := start("w1", false)
	waitTicks(30, "w1 alone")
	w2 := start("w2", true)
	waitTicks(60, "w2 joined")
	pub.mu.Lock()
	handedOver := 0
	for _, r := range pub.takeovers {
		if r.Worker == "w2" {
			handedOver++
		}
	}
	pub.mu.Unlock()
	if handedOver == 0 {
		t.Fatal("no sector was handed over to the worker that joined")
	}
	// w1 dies: its NATS connection goes (no renewal, no release), then its
	// goroutines stop. What it held then is each sector's newest report
	// (on a loaded machine w2 may have been handed every sector before).
	pub.mu.Lock()
	owner := map[uint32]TakeoverReport{}
	for _, r := range pub.takeovers {
		if o, ok := owner[r.Sector]; !ok || r.Epoch > o.Epoch {
			owner[r.Sector] = r
		}
	}
	pub.mu.Unlock()
	w1.nc.Close()
	crashed := time.Now()
	var w1Held []uint32
	for sector, r := range owner {
		if r.Worker == "w1" {
			w1Held = append(w1Held, sector)
		}
	}
	waitTicks(60, "w1 crash")
	stop(w1)
	pub.mu.Lock()
	var tookOver []TakeoverReport
	for _, r := range pub.takeovers {
		if r.Worker == "w2" && r.Acquired > crashed.UnixNano() {
			tookOver = append(tookOver, r)
		}
	}
	pub.mu.Unlock()
	// Every sector advanced after the crash (waitTicks), so w2 runs them
	// all; it took over at least those w1 held (on a loaded machine a
	// lease may also have gone back and forth before the crash, so the
	// count of hand-overs says little).
	took := map[uint32]bool{}
	for _, r := range tookOver {
		took[r.Sector] = true
	}
	if len(took) > game.Shards {
		t.Fatalf("w2 took over %d sectors after w1's crash, of %d", len(took), game.Shards)
	}
	pub.mu.Lock()
	after := map[uint32]bool{} // w2 holds the sector at an epoch past w1's
	for _, r := range pub.takeovers {
		if o := owner[r.Sector]; r.Worker == "w2" && r.Epoch > o.Epoch {
			after[r.Sector] = true
		}
	}
	pub.mu.Unlock()
	for _, sector := range w1Held {
		if !after[sector] {
			t.Fatalf("w2 did not take over sector %d, which w1 held when it crashed (w1 held %v; w2 took over %d sectors in %d reports; it had been handed %d before)",
				sector, w1Held, len(took), len(tookOver), handedOver)
		}
	}
	if len(w1Held) == 0 {
		t.Logf("w1 held no sector when it crashed (w2 had been handed them all): the crash needed no takeover")
	}
	for _, r := range tookOver {
		t.Logf("sector %d taken over %v after the crash (standby %v, restore %v, replay %v, ticks %d to %d)", r.Sector,
			time.Duration(r.Live-crashed.UnixNano()).Round(time.Millisecond), r.Standby, time.Duration(r.Restored-r.Acquired).Round(time.Millisecond),
			time.Duration(r.Live-r.Restored).Round(time.Millisecond), r.SnapshotTick, r.LiveTick)
	}
	stop(w2)

	// The uninterrupted re-simulation.
	reader := lc.NewClient(cmdlog.ClientConfig{})
	defer reader.Close()
	tail, err := reader.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var entries []msg.Entry
	for from := uint64(1); from <= tail; {
		es, err := reader.Read(ctx, from, int(tail-from+1))
		if err != nil || len(es) == 0 {
			t.Fatalf("read %d: %v", from, err)
		}
		for _, e := range es {
			if e.Pos <= tail {
				entries = append(entries, e)
			}
		}
		from = es[len(es)-1].Pos + 1
	}
	want := map[[2]uint64]uint64{}
	migrations := 0
	for _, e := range entries {
		if env, err := wire.DecodeEnvelope(e.Record.Data); err == nil && env.Kind == wire.EnvelopeMigration {
			migrations++
		}
	}
	wantLin := lineage.NewMemStore()
	if err := lineage.PutKindNames(ctx, wantLin, game.KindNames); err != nil {
		t.Fatal(err)
	}
	for s := range uint32(game.Shards) {
		sim, err := game.NewSim(s)
		if err != nil {
			t.Fatal(err)
		}
		rec := lineage.NewLog(lineage.LogOptions{Store: wantLin})
		r, err := replay.NewRunner(replay.RunnerConfig{World: 1, Shard: s, Sim: sim, Source: replay.NewSliceSource(entries, 1), Logger: quiet(),
			Recorder: rec, CommandKind: game.CommandKind, Observer: func(info replay.TickInfo) { want[[2]uint64{uint64(s), info.Tick}] = info.Hash }})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rec.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pub.mu.Lock()
	stepped := maps.Clone(pub.latest)
	pub.mu.Unlock()
	checkSharedLineage(t, ctx, e, wantLin, stepped)
	checkFrontEnd(t, ctx, fe, want, wantLin)
	pub.mu.Lock()
	defer pub.mu.Unlock()
	checked := 0
	for _, f := range pub.frames {
		h, ok := want[[2]uint64{uint64(f.Sector), f.Tick}]
		if !ok {
			continue
		}
		checked++
		if h != f.Hash {
			t.Fatalf("sector %d tick %d epoch %d: published %#x, re-simulation %#x", f.Sector, f.Tick, f.Epoch, f.Hash, h)
		}
	}
	if checked < 4*150 {
		t.Fatalf("only %d frames checked", checked)
	}
	t.Logf("%d frames equal the re-simulation of %d positions (%d migration records)", checked, tail, migrations)
}

// checkSharedLineage compares the lineage the workers recorded in the
// shared store, across the hand-over and the takeover, with the
// uninterrupted re-simulation's: every tick the shared store holds must
// have the same inputs and events, and the store must hold the ticks of
// every sector from its first range on.
//
// stepped is each sector's newest tick a worker published a frame of:
// the re-simulation may go further (tick markers the Ticker appended
// after the sectors stopped), and those ticks nobody ran.
func checkSharedLineage(t *testing.T, ctx context.Context, e *natscoord.Embedded, want lineage.Store, stepped map[uint32]uint64) {
	t.Helper()
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := OpenLineageStore(ctx, js, LineageStoreConfig{World: 1})
	if err != nil {
		t.Fatal(err)
	}
	ticks := func(s lineage.Store) map[[2]uint64]string {
		infos, err := s.Ranges(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[[2]uint64]string{}
		var r lineage.Range
		for _, in := range infos {
			b, err := s.GetRange(ctx, in.Shard, in.FirstTick)
			if err != nil {
				t.Fatal(err)
			}
			if err := lineage.DecodeRange(b, &r); err != nil {
				t.Fatal(err)
			}
			for i := range r.Ticks() {
				out[[2]uint64{uint64(r.Shard), r.FirstTick + uint64(i)}] = fmt.Sprint(r.TickInputs(i), r.TickEvents(i))
			}
		}
		return out
	}
	got, exp := ticks(shared), ticks(want)
	same, events := 0, 0
	for k, g := range got {
		w, ok := exp[k]
		if !ok {
			continue // past the re-simulation's end
		}
		if g != w {
			t.Fatalf("sector %d tick %d: shared lineage %s, re-simulation %s", k[0], k[1], g, w)
		}
		same++
		if len(g) > len("[] []") {
			events++
		}
	}
	// A gap (a tick missing below one the store holds) fails. A missing
	// tail (after the last range of a sector) is the clean stop's last
	// range, written only while the lease is valid: on a machine loaded
	// past the lease (a renewal slower than a third of the TTL) it may not
	// go out, and the sector's next owner would record it again. It is
	// reported.
	last := map[uint64]uint64{}
	for k := range got {
		last[k[0]] = max(last[k[0]], k[1])
	}
	var missing, tail []string
	for k := range exp {
		if _, ok := got[k]; !ok && k[1] <= stepped[uint32(k[0])] {
			if k[1] > last[k[0]] {
				tail = append(tail, fmt.Sprintf("%d/%d", k[0], k[1]))
			} else {
				missing = append(missing, fmt.Sprintf("%d/%d", k[0], k[1]))
			}
		}
	}
	slices.Sort(missing)
	slices.Sort(tail)
	if len(tail) > 0 {
		t.Logf("the last range at the stop did not go out for %d sector-ticks (the lease not renewed in time on a loaded machine): %v", len(tail), tail)
	}
	if len(missing) > 0 || same < 4*100 || events == 0 {
		t.Fatalf("%d ticks of shared lineage match the re-simulation's (%d with inputs or events); missing from the shared store: %v", same, events, missing)
	}
	t.Logf("shared lineage: %d ticks equal the re-simulation's (%d with inputs or events), none missing", same, events)
}

// checkFrontEnd compares what a front end node answers with the
// uninterrupted re-simulation: every hash its /world/hashes lists (and it
// must list most ticks of every sector), and the lineage queries (why
// each player's ship is as it is, and what a tick's inputs were) it
// answers from the shared store.
func checkFrontEnd(t *testing.T, ctx context.Context, fe *FrontEndNode, want map[[2]uint64]uint64, wantLin lineage.Store) {
	t.Helper()
	rec := httptest.NewRecorder()
	FrontEndHashesHandler(func() *FrontEndNode { return fe }).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/world/hashes?from=1", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("front end /world/hashes: %d %s", rec.Code, rec.Body)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n") {
		var tick, sector, hash, pos uint64
		if _, err := fmt.Sscanf(line, "%d %d %x %d", &tick, &sector, &hash, &pos); err != nil {
			t.Fatalf("front end /world/hashes line %q: %v", line, err)
		}
		w, ok := want[[2]uint64{sector, tick}]
		if !ok {
			continue
		}
		if w != hash {
			t.Fatalf("front end /world/hashes: sector %d tick %d %#x, re-simulation %#x", sector, tick, hash, w)
		}
		checked++
	}
	if st := fe.Stats(); checked < 4*150 || st.HashConflicts != 0 {
		t.Fatalf("front end: %d hashes equal the re-simulation's, %d conflicts", checked, st.HashConflicts)
	}

	store, release := fe.LineageStore()
	defer release()
	if store == nil {
		t.Fatal("the front end has no lineage store")
	}
	got, err := lineage.LoadIndex(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := lineage.LoadIndex(ctx, wantLin)
	if err != nil {
		t.Fatal(err)
	}
	// The last tick every sector's shared lineage reaches.
	through := ^uint64(0)
	for s := range lineage.ShardID(4) {
		var last uint64
		for _, r := range got.Ranges() {
			if r.Shard == s {
				last = max(last, r.LastTick)
			}
		}
		through = min(through, last)
	}
	if through < 100 {
		t.Fatalf("the shared lineage reaches tick %d of every sector", through)
	}
	whys, inputs, named := 0, 0, 0
	for _, tick := range []uint64{through / 2, through} {
		for p := uint32(1); p <= 8; p++ {
			g, gerr := got.Why(lineage.AnyShard, broadside.ShipID(p), tick, -1)
			w, werr := exp.Why(lineage.AnyShard, broadside.ShipID(p), tick, -1)
			if (gerr == nil) != (werr == nil) {
				t.Fatalf("why ship:%d at tick %d: front end %v, re-simulation %v", p, tick, gerr, werr)
			}
			if gerr != nil {
				continue
			}
			if gs, ws := fmt.Sprint(g.Applications, g.AllCauses(), g.Chain()), fmt.Sprint(w.Applications, w.AllCauses(), w.Chain()); gs != ws {
				t.Fatalf("why ship:%d at tick %d: front end %s\nre-simulation %s", p, tick, gs, ws)
			}
			whys++
		}
	}
	for tick := uint64(1); tick <= through; tick++ {
		g, _ := got.Frame(tick)
		w, _ := exp.Frame(tick)
		if gs, ws := fmt.Sprintf("%+v", g), fmt.Sprintf("%+v", w); gs != ws {
			t.Fatalf("frame %d: front end %s\nre-simulation %s", tick, gs, ws)
		}
		for _, fs := range g.Shards {
			for _, in := range fs.Inputs {
				inputs++
				if in.KindName != "" {
					named++
				}
			}
		}
	}
	if whys < 8 || inputs == 0 || named != inputs {
		t.Fatalf("front end lineage: %d why answers, %d frame inputs (%d named) compared", whys, inputs, named)
	}
	t.Logf("front end: %d hashes, %d why answers (ticks %d and %d) and the frames of ticks 1 to %d (%d inputs) equal the re-simulation's",
		checked, whys, through/2, through, through, inputs)
}
