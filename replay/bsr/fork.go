package bsr

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"golang.org/x/mod/sumdb/note"
)

// forkMetaName is the metadata name under which a fork records its
// ForkInfo.
const forkMetaName = "bsr.fork"

// maxForkList bounds the players and positions a ForkInfo lists.
const maxForkList = 1 << 16

// maxSignerName bounds a ForkInfo's signer name.
const maxSignerName = 1 << 10

// ErrNoSuchPosition is returned by Fork for a position to drop that is not
// one of the recorded log entries it re-simulates.
var ErrNoSuchPosition = errors.New("bsr: fork: no such recorded position")

// ForkInfo says what a fork recording is a fork of; Fork writes it into
// the fork (read it back with Reader.Fork).
type ForkInfo struct {
	// Of names the original recording (its file name).
	Of string
	// At is the first tick whose inputs were changed; From the tick of the
	// snapshot the re-simulation started from (From < At).
	At, From uint64
	// WithoutPlayers are the players whose commands at ticks >= At were
	// removed; Dropped the log positions removed explicitly; AsBot the
	// players whose ships bots sailed from At on.
	WithoutPlayers []uint32
	Dropped        []uint64
	AsBot          []uint32
	// Removed counts the log entries removed.
	Removed uint64
	// Signer names the key that signed the fork's log checkpoints
	// (ForkConfig.Signer); "" marks an unsigned fork.
	Signer string
}

// appendForkInfo encodes fi: version 1, or 2 for a signed fork (the
// signer's name follows the count).
func appendForkInfo(b []byte, fi *ForkInfo) []byte {
	version := byte(1)
	if fi.Signer != "" {
		version = 2
	}
	b = append(b, version)
	b = binary.AppendUvarint(b, fi.At)
	b = binary.AppendUvarint(b, fi.From)
	b = binary.AppendUvarint(b, uint64(len(fi.Of)))
	b = append(b, fi.Of...)
	b = binary.AppendUvarint(b, uint64(len(fi.WithoutPlayers)))
	for _, p := range fi.WithoutPlayers {
		b = binary.AppendUvarint(b, uint64(p))
	}
	b = binary.AppendUvarint(b, uint64(len(fi.Dropped)))
	for _, p := range fi.Dropped {
		b = binary.AppendUvarint(b, p)
	}
	b = binary.AppendUvarint(b, uint64(len(fi.AsBot)))
	for _, p := range fi.AsBot {
		b = binary.AppendUvarint(b, uint64(p))
	}
	b = binary.AppendUvarint(b, fi.Removed)
	if fi.Signer != "" {
		b = binary.AppendUvarint(b, uint64(len(fi.Signer)))
		b = append(b, fi.Signer...)
	}
	return b
}

// decodeForkInfo decodes what appendForkInfo wrote.
func decodeForkInfo(b []byte) (ForkInfo, error) {
	var fi ForkInfo
	bad := func(what string) (ForkInfo, error) {
		return ForkInfo{}, fmt.Errorf("%w: fork info: %s", ErrCorrupt, what)
	}
	if len(b) == 0 || (b[0] != 1 && b[0] != 2) {
		return bad("unknown version")
	}
	orig, version := b, b[0]
	b = b[1:]
	next := func() (uint64, bool) {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, false
		}
		b = b[k:]
		return v, true
	}
	var ok bool
	if fi.At, ok = next(); !ok {
		return bad("malformed tick")
	}
	if fi.From, ok = next(); !ok || fi.From >= fi.At {
		return bad("malformed start tick")
	}
	n, ok := next()
	if !ok || n > uint64(len(b)) || n > MaxGameName*16 {
		return bad("malformed name")
	}
	fi.Of, b = string(b[:n]), b[n:]
	if n, ok = next(); !ok || n > maxForkList || n > uint64(len(b)) {
		return bad("malformed player list")
	}
	for range n {
		p, ok := next()
		if !ok || p > 1<<32-1 {
			return bad("malformed player")
		}
		fi.WithoutPlayers = append(fi.WithoutPlayers, uint32(p))
	}
	if n, ok = next(); !ok || n > maxForkList || n > uint64(len(b)) {
		return bad("malformed position list")
	}
	for range n {
		p, ok := next()
		if !ok {
			return bad("malformed position")
		}
		fi.Dropped = append(fi.Dropped, p)
	}
	if n, ok = next(); !ok || n > maxForkList || n > uint64(len(b)) {
		return bad("malformed bot list")
	}
	for range n {
		p, ok := next()
		if !ok || p > 1<<32-1 {
			return bad("malformed bot player")
		}
		fi.AsBot = append(fi.AsBot, uint32(p))
	}
	if fi.Removed, ok = next(); !ok {
		return bad("malformed count")
	}
	if version == 2 {
		if n, ok = next(); !ok || n == 0 || n > uint64(len(b)) || n > maxSignerName {
			return bad("malformed signer")
		}
		fi.Signer, b = string(b[:n]), b[n:]
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	if string(appendForkInfo(nil, &fi)) != string(orig) {
		return bad("not in canonical form") // overlong varints
	}
	return fi, nil
}

// Fork returns the recording's ForkInfo if it is a fork (ok false if not).
func (r *Reader) Fork() (ForkInfo, bool, error) {
	v, ok, err := r.metaValue(forkMetaName)
	if err != nil || !ok {
		return ForkInfo{}, false, err
	}
	fi, err := decodeForkInfo(v)
	if err != nil {
		return ForkInfo{}, false, fmt.Errorf("%s: %w", r.path, err)
	}
	return fi, true, nil
}

// ForkConfig configures Fork.
type ForkConfig struct {
	// Reader is the original recording; Writer receives the fork (its
	// header should be the original's). Fork does not close either.
	Reader *Reader
	Writer *Writer
	// NewSim returns a fresh sim of shard (as for Record).
	NewSim func(shard uint32) (replay.TableSim, error)
	// CommandKind and KindNames are Record's (for the fork's lineage).
	CommandKind func(replay.Command) uint8
	KindNames   map[uint8]string
	// At is the first tick whose inputs change (> the recording's base).
	At uint64
	// WithoutPlayers removes the player commands (netcode/wire envelopes
	// of kind PlayerCommand) of these players that are inputs of ticks >=
	// At.
	WithoutPlayers []uint32
	// Drop removes these log positions; each must be a recorded player
	// command that is an input of a tick >= At.
	Drop []uint64
	// Bots hands players to bots from tick At: their recorded commands
	// from At on are removed, and before the inputs of every tick n >= At
	// the player's bot is asked for the commands it sends (it sees the
	// sims after tick n-1). Bots are game code (a game-side hook).
	Bots map[uint32]Bot
	// Of names the original in the fork's ForkInfo.
	Of string
	// Signer, if set, signs the fork's log checkpoints (RecordConfig.
	// Signer): the fork is then verified with its verifier key, like a
	// server's recording. Without it the fork is marked unsigned
	// (ForkInfo.Signer ""). A fork's log is not the original's, so the
	// original's signatures never cover it.
	Signer note.Signer
}

// Bot plays one player in a fork: given the tick whose inputs are being
// gathered and the sims after the tick before it, it returns the payloads
// of the commands the player sends (nil: none).
type Bot func(tick uint64, sims []replay.TableSim) [][]byte

// Fork writes a what-if recording: it restores every shard from the
// newest snapshot of cfg.Reader before tick At (or the start of the
// world), re-simulates the recorded log from there with the changed
// inputs, and records the result into cfg.Writer, a normal recording
// (verify, seek, diff and lineage work on it) that starts at that
// snapshot and carries a ForkInfo.
//
// The sectors run live from the snapshot: the migrations between shards
// recorded after it are not replayed but replaced by the ones the fork's
// sims produce, each in the place of the recorded one it corresponds to
// (the k-th output of a shard's tick takes the position of the recorded
// k-th; outputs the original did not have go before the next tick
// marker). With nothing removed the fork reproduces the original exactly.
// The fork keeps the original's log positions (an output takes the
// position of the recorded one it replaces) until an entry must be
// inserted where the original has no free position (a bot's command, an
// output the original lacks): the entries after it are then shifted. Game
// fields that hold positions thus differ only where the logs do.
func Fork(ctx context.Context, cfg ForkConfig) (RecordStats, ForkInfo, error) {
	r := cfg.Reader
	if r == nil || cfg.Writer == nil || cfg.NewSim == nil {
		return RecordStats{}, ForkInfo{}, errors.New("bsr: fork: Reader, Writer and NewSim are required")
	}
	if cfg.At <= r.base || cfg.At > r.last {
		return RecordStats{}, ForkInfo{}, fmt.Errorf("%w: fork at tick %d (recording holds %d..%d)", ErrOutOfRange, cfg.At, r.FirstTick(), r.last)
	}
	sims, start, err := r.restoreBefore(cfg.At, cfg.NewSim)
	if err != nil {
		return RecordStats{}, ForkInfo{}, err
	}
	// The fencing state at the snapshot: the fork's runners must accept
	// the outputs the original's accepted, and the fork's log no longer
	// holds the claims before it (Record writes it into the fork).
	if start.Fences, err = r.fencesAt(ctx, start.Pos); err != nil {
		return RecordStats{}, ForkInfo{}, err
	}
	fi := ForkInfo{Of: cfg.Of, At: cfg.At, From: start.Tick,
		WithoutPlayers: slices.Sorted(slices.Values(cfg.WithoutPlayers)), Dropped: slices.Sorted(slices.Values(cfg.Drop))}
	for p := range cfg.Bots {
		fi.AsBot = append(fi.AsBot, p)
	}
	slices.Sort(fi.AsBot)
	fi.WithoutPlayers, fi.Dropped = slices.Compact(fi.WithoutPlayers), slices.Compact(fi.Dropped)
	if err := r.checkDrops(fi.Dropped, cfg.At); err != nil {
		return RecordStats{}, ForkInfo{}, err
	}
	fs, err := newForkSource(ctx, r, start, cfg, &fi, sims)
	if err != nil {
		return RecordStats{}, ForkInfo{}, err
	}
	if cfg.Signer != nil {
		fi.Signer = cfg.Signer.Name()
	}
	st, err := Record(ctx, RecordConfig{
		Source: fs, Writer: cfg.Writer, Sims: sims, Start: start,
		CommandKind: cfg.CommandKind, KindNames: cfg.KindNames, OnTick: fs.produced, Signer: cfg.Signer,
	})
	if err != nil {
		return st, fi, fmt.Errorf("bsr: fork: %w", err)
	}
	fi.Removed = fs.removed
	if err := cfg.Writer.WriteMeta(forkMetaName, appendForkInfo(nil, &fi)); err != nil {
		return st, fi, fmt.Errorf("bsr: fork: %w", err)
	}
	return st, fi, nil
}

// restoreBefore returns every shard's sim restored from the newest
// snapshot before tick at that all shards have (or fresh sims at the
// start of the world) and its checkpoint.
func (r *Reader) restoreBefore(at uint64, newSim func(uint32) (replay.TableSim, error)) ([]replay.TableSim, replay.Checkpoint, error) {
	// The newest tick < at with a snapshot of every shard.
	var tick uint64
	var found bool
	for _, c := range r.snaps[0] {
		if c.First >= at {
			break
		}
		all := true
		for s := 1; s < int(r.h.Shards); s++ {
			if _, ok := r.snapshotAt(uint32(s), c.First); !ok {
				all = false
				break
			}
		}
		if all {
			tick, found = c.First, true
		}
	}
	if !found && r.base != 0 {
		return nil, replay.Checkpoint{}, fmt.Errorf("%w: no snapshot of every shard before tick %d", ErrOutOfRange, at)
	}
	sims := make([]replay.TableSim, r.h.Shards)
	var start replay.Checkpoint
	for s := range sims {
		sim, err := newSim(uint32(s))
		if err != nil {
			return nil, start, fmt.Errorf("bsr: fork: new sim of shard %d: %w", s, err)
		}
		sims[s] = sim
		if !found {
			continue
		}
		k, _ := r.snapshotAt(uint32(s), tick)
		chain, _, err := r.loadChain(uint32(s), k)
		if err != nil {
			return nil, start, err
		}
		tip := &r.snaps[s][k]
		if err := restoreChain(sim, chain, tip); err != nil {
			return nil, start, err
		}
		start = replay.Checkpoint{Tick: tip.First, Pos: tip.Aux1}
	}
	return sims, start, nil
}

// checkDrops checks that every position is a recorded player command
// that is an input of a tick >= at.
func (r *Reader) checkDrops(drops []uint64, at uint64) error {
	for _, pos := range drops {
		i := sort.Search(len(r.cmds), func(i int) bool { return r.cmds[i].Aux2 >= pos })
		if i == len(r.cmds) || pos <= r.cmds[i].Aux1 {
			return fmt.Errorf("%w: position %d (the recording holds %s)", ErrNoSuchPosition, pos, r.posRange())
		}
		entries, err := r.commandsChunk(&r.cmds[i])
		if err != nil {
			return err
		}
		j := sort.Search(len(entries), func(j int) bool { return entries[j].Pos >= pos })
		if j == len(entries) || entries[j].Pos != pos {
			return fmt.Errorf("%w: position %d is not in the recorded log", ErrNoSuchPosition, pos)
		}
		env, err := wire.DecodeEnvelope(entries[j].Record.Data)
		if err != nil || env.Kind != wire.EnvelopePlayerCommand {
			return fmt.Errorf("%w: position %d is not a player command", ErrNoSuchPosition, pos)
		}
		// The entry is an input of the tick after the last marker before it.
		tick := r.cmds[i].First
		for _, e := range entries[:j] {
			if t, ok := markerTick(e.Record.Data); ok {
				tick = t + 1
			}
		}
		if tick < at {
			return fmt.Errorf("%w: position %d is an input of tick %d, before the fork tick %d", ErrNoSuchPosition, pos, tick, at)
		}
	}
	return nil
}

func (r *Reader) posRange() string {
	if len(r.cmds) == 0 {
		return "no entries"
	}
	return fmt.Sprintf("positions %d..%d", r.cmds[0].Aux1+1, r.cmds[len(r.cmds)-1].Aux2)
}

// outKey names the outputs of one shard's tick.
type outKey struct {
	shard uint32
	tick  uint64
}

// forkSource is the fork's log: the recorded one from the snapshot on,
// without the removed entries, with the bots' commands, and with the
// fork's own migrations in place of the recorded ones.
type forkSource struct {
	src     *entrySource
	world   uint32
	shards  uint32
	from    uint64 // the snapshot's tick: migrations of later ticks are the fork's own
	at      uint64
	next    uint64 // the tick the next recorded entry is an input of
	pos     uint64 // the fork's last position
	shift   uint64 // fork position - original position of the recorded entries
	players []uint32
	drop    []uint64
	bots    []uint32
	botFns  map[uint32]Bot
	sims    []replay.TableSim
	removed uint64

	// fences follows the lease claims of the log as the fork's runners
	// read it: the fork's outputs carry their shard's current epoch, and
	// the recorded outputs the runners ignore as stale stay as they are.
	fences   fenceEpochs
	epochSeq map[uint32][2]uint64    // per shard: the epoch of its last fenced output and its count in that epoch
	byTick   bool                    // the recorded migrations do not say their shard: key by tick alone
	recorded map[outKey]int          // recorded migrations of each shard's tick (after from)
	slot     map[outKey]int          // recorded migrations of each met so far
	outs     map[outKey][]forkOutput // the fork's outputs not yet placed
	loose    []outKey                // keys the original had no output of, in production order
	seq      []uint64                // per shard, the fork's output sequence
	botSeq   uint64
	queue    []msg.Entry
	botDone  uint64 // last tick the bots were asked about
}

func newForkSource(ctx context.Context, r *Reader, start replay.Checkpoint, cfg ForkConfig, fi *ForkInfo, sims []replay.TableSim) (*forkSource, error) {
	f := &forkSource{
		src: r.newEntrySource(start.Pos, ^uint64(0)), world: r.h.World, shards: r.h.Shards,
		from: start.Tick, at: cfg.At, next: start.Tick + 1, pos: start.Pos,
		players: append(slices.Clone(fi.WithoutPlayers), fi.AsBot...), drop: fi.Dropped, bots: fi.AsBot,
		botFns: cfg.Bots, sims: sims, recorded: map[outKey]int{}, slot: map[outKey]int{}, outs: map[outKey][]forkOutput{},
		seq: make([]uint64, r.h.Shards), botDone: cfg.At - 1,
		fences: fenceEpochsOf(start.Fences), epochSeq: map[uint32][2]uint64{},
	}
	slices.Sort(f.players)
	f.players = slices.Compact(f.players)
	// Count the recorded migrations of every shard's tick after the
	// snapshot: they say where the fork's own go.
	scan := r.newEntrySource(start.Pos, ^uint64(0))
	fences := fenceEpochsOf(start.Fences)
	for {
		e, err := scan.Next(ctx)
		if errors.Is(err, replay.ErrEndOfLog) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("bsr: fork: %w", err)
		}
		if k, ok := f.migrationKey(e, fences); ok {
			f.recorded[k]++
		} else if f.isLaterMigration(e) {
			f.byTick = true
		}
	}
	if f.byTick {
		// Some recorded migrations carry foreign record ids: place the
		// fork's outputs of a tick, in shard order, in the slots of the
		// tick's recorded ones.
		clear(f.recorded)
		scan = r.newEntrySource(start.Pos, ^uint64(0))
		fences = fenceEpochsOf(start.Fences)
		for {
			e, err := scan.Next(ctx)
			if errors.Is(err, replay.ErrEndOfLog) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("bsr: fork: %w", err)
			}
			if k, ok := f.migrationKey(e, fences); ok {
				f.recorded[k]++
			}
		}
	}
	return f, nil
}

// isLaterMigration reports whether e is a migration produced after the
// snapshot.
func (f *forkSource) isLaterMigration(e msg.Entry) bool {
	env, err := wire.DecodeEnvelope(e.Record.Data)
	return err == nil && env.Kind == wire.EnvelopeMigration && env.Tick > f.from
}

// migrationKey returns the shard and tick that produced a recorded
// migration of a tick after the snapshot (the tick alone, shard
// BroadcastShard, in byTick mode). fences follows the log up to e (it
// reads e if e is a lease claim): a migration the runners ignore as stale
// is not one (the fork keeps it as it is, ignored likewise).
func (f *forkSource) migrationKey(e msg.Entry, fences fenceEpochs) (outKey, bool) {
	env, err := wire.DecodeEnvelope(e.Record.Data)
	if err != nil {
		return outKey{}, false
	}
	fences.read(&env)
	if env.Kind != wire.EnvelopeMigration || env.Tick <= f.from || replay.StaleOutput(&env, e.Record.ID.Client, fences.epoch) {
		return outKey{}, false
	}
	if f.byTick {
		return outKey{replay.BroadcastShard, env.Tick}, true
	}
	if env.Epoch != 0 {
		return outKey{env.Source, env.Tick}, env.Source < f.shards
	}
	for s := range f.shards {
		if e.Record.ID.Client == replay.OutputClientID(f.world, s) {
			return outKey{s, env.Tick}, true
		}
	}
	return outKey{}, false
}

// produced takes a shard's outputs of a tick (RecordConfig.OnTick).
func (f *forkSource) produced(info replay.TickInfo) {
	if len(info.Produced) == 0 {
		return
	}
	k := outKey{info.Shard, info.Tick}
	if f.byTick {
		k.shard = replay.BroadcastShard
	}
	for _, o := range info.Produced {
		if len(o.Payload) > wire.MaxEnvelopeSize-256 {
			continue // the runner drops it too
		}
		f.outs[k] = append(f.outs[k], forkOutput{info.Shard, slices.Clone(o.Payload)})
	}
	if f.recorded[k] == 0 && !slices.Contains(f.loose, k) {
		f.loose = append(f.loose, k)
	}
}

// emitOutput queues the fork's next output of k, at the original
// position pos (0: inserted).
func (f *forkSource) emitOutput(k outKey, pos uint64) bool {
	q := f.outs[k]
	if len(q) == 0 {
		return false
	}
	o := q[0]
	f.seq[o.shard]++
	env := wire.Envelope{Kind: wire.EnvelopeMigration, Tick: k.tick, Shard: replay.BroadcastShard,
		ClientSeq: f.seq[o.shard], Payload: o.payload}
	id := msg.RecordID{Client: replay.OutputClientID(f.world, o.shard), Seq: f.seq[o.shard]}
	if epoch := f.fences[o.shard]; epoch != 0 {
		// The shard is fenced here: its output carries the epoch of its
		// newest claim, as its worker's would, under that epoch's client
		// id, counted from 1 within the epoch.
		es := f.epochSeq[o.shard]
		if es[0] != epoch {
			es = [2]uint64{epoch, 0}
		}
		es[1]++
		f.epochSeq[o.shard] = es
		env.Epoch, env.Source = epoch, o.shard
		id = msg.RecordID{Client: replay.FencedOutputClientID(f.world, o.shard, epoch), Seq: es[1]}
	}
	data := wire.EncodeEnvelope(nil, env)
	f.queue = append(f.queue, msg.Entry{Pos: pos, Record: msg.Record{ID: id, Data: data}})
	if f.outs[k] = q[1:]; len(f.outs[k]) == 0 {
		delete(f.outs, k)
	}
	return true
}

// forkOutput is one output of the fork's sims.
type forkOutput struct {
	shard   uint32
	payload []byte
}

// botClient is the record client id of the fork's bot commands.
const botClient = 1<<62 | 0xB07

// Next implements replay.Source.
func (f *forkSource) Next(ctx context.Context) (msg.Entry, error) {
	for len(f.queue) == 0 {
		e, err := f.src.Next(ctx)
		if err != nil {
			return e, err
		}
		if t, ok := markerTick(e.Record.Data); ok {
			// Before the marker: the outputs the original had no place
			// for, then the bots' commands for this tick.
			for _, k := range f.loose {
				for f.emitOutput(k, 0) {
				}
			}
			f.loose = f.loose[:0]
			if t >= f.at && t > f.botDone {
				for _, p := range f.bots {
					for _, payload := range f.botFns[p](t, f.sims) {
						f.botSeq++
						data := wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopePlayerCommand, Player: p, ClientSeq: f.botSeq, Payload: payload})
						f.queue = append(f.queue, msg.Entry{Record: msg.Record{ID: msg.RecordID{Client: botClient, Seq: f.botSeq}, Data: data}})
					}
				}
				f.botDone = t
			}
			f.next = max(f.next, t+1)
			f.queue = append(f.queue, e)
			break
		}
		if k, ok := f.migrationKey(e, f.fences); ok {
			// The recorded k-th output of a shard's tick: the fork's k-th
			// takes its place (and after the last, the fork's extra).
			f.slot[k]++
			f.emitOutput(k, e.Pos)
			if f.slot[k] == f.recorded[k] {
				for f.emitOutput(k, 0) {
				}
			}
			if len(f.queue) == 0 {
				f.removed++
			}
			continue
		}
		if f.next >= f.at && f.remove(e) {
			f.removed++
			continue
		}
		f.queue = append(f.queue, e)
	}
	e := f.queue[0]
	f.queue = f.queue[1:]
	if e.Pos == 0 {
		e.Pos = f.pos + 1 // inserted
	} else {
		e.Pos += f.shift
		if e.Pos <= f.pos {
			f.shift += f.pos + 1 - e.Pos
			e.Pos = f.pos + 1
		}
	}
	f.pos = e.Pos
	return e, nil
}

func (f *forkSource) remove(e msg.Entry) bool {
	if _, ok := slices.BinarySearch(f.drop, e.Pos); ok {
		return true
	}
	if len(f.players) == 0 {
		return false
	}
	env, err := wire.DecodeEnvelope(e.Record.Data)
	if err != nil || env.Kind != wire.EnvelopePlayerCommand {
		return false
	}
	_, ok := slices.BinarySearch(f.players, env.Player)
	return ok
}
