package world

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
)

// LocalConfig configures a LocalWorld.
type LocalConfig struct {
	// ID is the world id (default DefaultID).
	ID uint32
	// Game is the game the world runs (required).
	Game Game
	// Recorder, if set, returns the lineage recorder of shard's runner.
	Recorder func(shard uint32) lineage.Recorder
	// Observer, if set, is called after each shard's step, on the
	// goroutine that called Step (see replay.TickInfo for what it may
	// keep).
	Observer func(replay.TickInfo)
	// HistoryTicks is the length of each shard's hash history (default
	// replay.DefaultHistoryTicks).
	HistoryTicks int
	// KeepLog keeps the whole log in memory (Log, Entries); by default a
	// LocalWorld read through Source trims what every reader has passed.
	KeepLog bool
	// Logger receives the runners' warnings (nil: slog.Default()).
	Logger *slog.Logger
	// OutputDelay makes the shards' outputs reach the log this many ticks
	// late, as a slow log does: an output of tick n is appended after
	// TICK(n+OutputDelay) instead of right after TICK(n), so it is an
	// input of tick n+1+OutputDelay (default 0). Tests use it to keep
	// entities in transit between shards.
	OutputDelay int
}

// LocalWorld runs a world's shards on an in-memory log (replay.MemLog)
// with a manual clock: Submit appends player commands, Step appends the
// next TICK marker and runs every shard's Runner through it, one after the
// other, and the runners append their outputs (migrations) after the
// marker, as they do live. So the log of a tick is laid out in one place,
// as a running world lays it out: the previous tick's outputs and the
// commands submitted since, then the marker. Everything that generates or
// re-simulates a match offline runs on it (tools, tests, benchmarks).
// With an OutputDelay, outputs come OutputDelay markers later, still
// before that tick's commands, as through a slow log.
type LocalWorld struct {
	cfg     LocalConfig
	log     *replay.MemLog
	runners []*replay.Runner
	tick    uint64
	// markerPos is the log position of the last marker appended.
	markerPos uint64
	seq       map[uint32]uint64 // client sequence of each player's last command
	held      *heldOutputs      // the outputs not yet due (OutputDelay), or nil
	ctx       context.Context
	cancel    context.CancelFunc
	err       error
}

// LocalPlayerClient is the record client id of player's commands in a
// LocalWorld's log.
func LocalPlayerClient(player uint32) uint64 { return 1<<62 | uint64(player) }

// NewLocal returns a LocalWorld at tick 0; Close releases it.
func NewLocal(cfg LocalConfig) (*LocalWorld, error) {
	if err := cfg.Game.Validate(); err != nil {
		return nil, err
	}
	if cfg.ID == 0 {
		cfg.ID = DefaultID
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &LocalWorld{cfg: cfg, log: replay.NewMemLog(), seq: map[uint32]uint64{}}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	var app replay.Appender = w.log
	if cfg.OutputDelay > 0 {
		w.held = &heldOutputs{}
		app = w.held
	}
	for i := range cfg.Game.Shards {
		shard := uint32(i)
		sim, err := cfg.Game.NewSim(shard)
		if err != nil {
			return nil, fmt.Errorf("world: shard %d: %w", shard, err)
		}
		var rec lineage.Recorder
		if cfg.Recorder != nil {
			rec = cfg.Recorder(shard)
		}
		r, err := replay.NewRunner(replay.RunnerConfig{
			World: cfg.ID, Shard: shard, Sim: sim, Source: w.log.Subscribe(1), Appender: app,
			Recorder: rec, CommandKind: cfg.Game.CommandKind, Observer: cfg.Observer,
			HistoryTicks: cfg.HistoryTicks, Logger: cfg.Logger, Synchronous: true,
		})
		if err != nil {
			return nil, err
		}
		w.runners = append(w.runners, r)
	}
	return w, nil
}

// Submit appends a command of player with the player's next client
// sequence number; it is an input of the next tick.
func (w *LocalWorld) Submit(player uint32, payload []byte) error {
	if player == 0 {
		return errors.New("world: player 0 is the engine")
	}
	w.seq[player]++
	return w.SubmitSeq(player, w.seq[player], payload)
}

// SubmitSeq appends a command of player with the given client sequence
// number (a second command with the same number is not stored).
func (w *LocalWorld) SubmitSeq(player uint32, seq uint64, payload []byte) error {
	data := wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopePlayerCommand, Player: player, ClientSeq: seq, Payload: payload})
	w.seq[player] = max(w.seq[player], seq)
	return w.log.AppendWithID(w.ctx, msg.RecordID{Client: LocalPlayerClient(player), Seq: seq}, data)
}

// Step appends TICK(n) for the next tick n and runs every shard through it.
func (w *LocalWorld) Step() error {
	if w.err != nil {
		return w.err
	}
	n := w.tick + 1
	marker := wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeTick, Tick: n})
	if err := w.log.AppendWithID(w.ctx, msg.RecordID{Client: replay.TickerClientID(w.cfg.ID), Seq: n}, marker); err != nil {
		w.err = err
		return err
	}
	w.markerPos = w.log.Tail()
	for _, r := range w.runners {
		if err := r.RunUntil(w.ctx, n); err != nil {
			w.err = fmt.Errorf("world: shard %d, tick %d: %w", r.Shard(), n, err)
			return w.err
		}
	}
	if w.held != nil {
		// RunUntil returned once every output of tick n was handed over.
		if err := w.held.release(w.ctx, w.log, n-min(n, uint64(w.cfg.OutputDelay))); err != nil {
			w.err = fmt.Errorf("world: tick %d: %w", n, err)
			return w.err
		}
	}
	w.tick = n
	return nil
}

// InTransit returns the payloads of the shards' outputs that no tick has
// taken as input yet (appended after the last marker, or held back by
// OutputDelay), in the order the next ticks take them; use it between
// Steps.
func (w *LocalWorld) InTransit() ([][]byte, error) {
	var out [][]byte
	for from := w.markerPos + 1; from <= w.log.Tail(); {
		es, err := w.log.Read(w.ctx, from, int(min(w.log.Tail()-from+1, 4096)))
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			if env, err := wire.DecodeEnvelope(e.Record.Data); err == nil && env.Kind == wire.EnvelopeMigration {
				out = append(out, env.Payload)
			}
			from = e.Pos + 1
		}
	}
	if w.held != nil {
		w.held.mu.Lock()
		for _, o := range w.held.items {
			out = append(out, o.payload)
		}
		w.held.mu.Unlock()
	}
	return out, nil
}

// heldOutputs is the runners' Appender of a LocalWorld with an
// OutputDelay: it holds every output until Step releases it into the log.
type heldOutputs struct {
	mu    sync.Mutex // the runners' output goroutines append
	items []heldOutput
}

type heldOutput struct {
	tick    uint64 // the tick that produced it
	id      msg.RecordID
	data    []byte
	payload []byte
}

// AppendWithID implements replay.Appender.
func (h *heldOutputs) AppendWithID(_ context.Context, id msg.RecordID, data []byte) error {
	env, err := wire.DecodeEnvelope(data)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.items = append(h.items, heldOutput{tick: env.Tick, id: id, data: data, payload: env.Payload})
	h.mu.Unlock()
	return nil
}

// release appends the outputs of ticks through tick to log, in the order
// they were produced.
func (h *heldOutputs) release(ctx context.Context, log *replay.MemLog, tick uint64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for n < len(h.items) && h.items[n].tick <= tick {
		if err := log.AppendWithID(ctx, h.items[n].id, h.items[n].data); err != nil {
			return err
		}
		n++
	}
	h.items = append(h.items[:0], h.items[n:]...)
	return nil
}

// Tick returns the last tick stepped.
func (w *LocalWorld) Tick() uint64 { return w.tick }

// Shards returns the number of shards.
func (w *LocalWorld) Shards() int { return len(w.runners) }

// Sim returns shard's sim; use it only between Steps.
func (w *LocalWorld) Sim(shard uint32) replay.Sim { return w.runners[shard].Sim() }

// Hashes returns shard's hash history.
func (w *LocalWorld) Hashes(shard uint32) *replay.HashHistory { return w.runners[shard].Hashes() }

// Stats returns shard's runner counters.
func (w *LocalWorld) Stats(shard uint32) replay.RunnerStats { return w.runners[shard].Stats() }

// Log returns the world's log.
func (w *LocalWorld) Log() *replay.MemLog { return w.log }

// Entries returns the log's retained entries.
func (w *LocalWorld) Entries() []msg.Entry { return w.log.Entries(1) }

// Close stops the world.
func (w *LocalWorld) Close() {
	w.cancel()
	w.log.Close()
}

// Source returns a replay.Source over the world's log from position 1 that
// plays the world as it is read: when the reader reaches the end of what
// was stepped, act is called with the next tick (to Submit that tick's
// commands, looking at the sims) and the world steps it; after tick
// through the source ends (replay.ErrEndOfLog). Unless KeepLog is set,
// what the reader passed is trimmed away, so a long match is generated in
// bounded memory.
func (w *LocalWorld) Source(through uint64, act func(tick uint64) error) replay.Source {
	return &localSource{w: w, through: through, act: act, next: 1}
}

type localSource struct {
	w       *LocalWorld
	through uint64
	act     func(tick uint64) error
	next    uint64
	buf     []msg.Entry
}

// Next implements replay.Source.
func (s *localSource) Next(ctx context.Context) (msg.Entry, error) {
	for len(s.buf) == 0 {
		if err := ctx.Err(); err != nil {
			return msg.Entry{}, err
		}
		if s.next <= s.w.markerPos {
			b, err := s.w.log.Read(ctx, s.next, int(min(s.w.markerPos-s.next+1, 4096)))
			if err != nil {
				return msg.Entry{}, err
			}
			s.buf = b
			break
		}
		if s.w.tick >= s.through {
			return msg.Entry{}, replay.ErrEndOfLog
		}
		if !s.w.cfg.KeepLog && s.next > 1 {
			// Every runner and this reader passed the last marker.
			if _, err := s.w.log.Trim(ctx, s.next-1); err != nil {
				return msg.Entry{}, err
			}
		}
		if s.act != nil {
			if err := s.act(s.w.tick + 1); err != nil {
				return msg.Entry{}, err
			}
		}
		if err := s.w.Step(); err != nil {
			return msg.Entry{}, err
		}
	}
	e := s.buf[0]
	s.buf = s.buf[1:]
	s.next = e.Pos + 1
	return e, nil
}

// Resimulate runs every shard of game from the start of world id over the
// log entries (from position 1) through tick through, offline, and returns
// each shard's hash history and final sim.
func Resimulate(ctx context.Context, game Game, id uint32, entries []msg.Entry, through uint64, logger *slog.Logger) ([]*replay.HashHistory, []replay.Sim, error) {
	if id == 0 {
		id = DefaultID
	}
	hashes := make([]*replay.HashHistory, game.Shards)
	sims := make([]replay.Sim, game.Shards)
	for i := range game.Shards {
		shard := uint32(i)
		sim, err := game.NewSim(shard)
		if err != nil {
			return nil, nil, err
		}
		r, err := replay.NewRunner(replay.RunnerConfig{
			World: id, Shard: shard, Sim: sim, Source: replay.NewSliceSource(entries, 1),
			HistoryTicks: int(through) + 1, Logger: logger,
		})
		if err != nil {
			return nil, nil, err
		}
		if err := r.RunUntil(ctx, through); err != nil && !errors.Is(err, replay.ErrEndOfLog) {
			return nil, nil, fmt.Errorf("shard %d: %w", shard, err)
		}
		hashes[i], sims[i] = r.Hashes(), sim
	}
	return hashes, sims, nil
}

// Game returns the game the world runs.
func (w *LocalWorld) Game() Game { return w.cfg.Game }
