package world

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/anoptic/broadside/replay"
)

// HealthHandler answers /healthz: the process is up (it answers at all).
func HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
}

// A Prober is what /readyz asks whether it can serve: Probe returns a
// one-line summary when it can, else why not. A World is probed through
// ReadyHandler; a front end of a world run elsewhere (natsworld) is one.
type Prober interface {
	Probe(ctx context.Context) (summary string, err error)
}

// ReadyHandler answers /readyz with 200 "ready" when the world world
// returns is Ready (the log answers, every shard is live, the world
// ticks), else 503 and the reason; checks, if set, add conditions of the
// process around the world (a nil error: fine).
func ReadyHandler(world func() *World, checks ...func() error) http.Handler {
	return ProbeHandler(func() Prober {
		if w := world(); w != nil {
			return worldProbe{w}
		}
		return nil
	}, "the world", checks...)
}

// worldProbe probes a World.
type worldProbe struct{ w *World }

func (p worldProbe) Probe(ctx context.Context) (string, error) {
	if err := p.w.Ready(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("tick %d, %d sectors live", p.w.Tick(), p.w.cfg.Game.Shards), nil
}

// ProbeHandler answers /readyz with 200 "ready: SUMMARY" when the checks
// pass and the Prober probe returns (what names it while probe returns
// nil: starting, or stopped) can serve, else 503 and the reason.
func ProbeHandler(probe func() Prober, what string, checks ...func() error) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		// The checks come first: they are cheap and name the cause (a
		// log that cannot store does not answer the world's probe
		// either, which would only say that it does not answer).
		for _, c := range checks {
			if err := c(); err != nil {
				http.Error(rw, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		p := probe()
		if p == nil {
			http.Error(rw, "not ready: "+what+" is not running (starting, or stopped)", http.StatusServiceUnavailable)
			return
		}
		summary, err := p.Probe(r.Context())
		if err != nil {
			http.Error(rw, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(rw, "ready: %s\n", summary)
	})
}

// A HashSource is what /world/hashes reads: the newest tick every shard
// has completed, how many shards there are, and each one's hash history.
// A World is one; a front end of a world run elsewhere keeps one from the
// frames it receives (natsworld).
type HashSource interface {
	Tick() uint64
	Shards() int
	Hashes(shard uint32) *replay.HashHistory
}

// maxHashTicks is the most ticks one /world/hashes answer lists.
const maxHashTicks = 10000

// HashesHandler answers GET /world/hashes?from=T for the world world
// returns (HashSourceHandler).
func HashesHandler(world func() *World) http.Handler {
	return HashSourceHandler(func() HashSource {
		if w := world(); w != nil {
			return w
		}
		return nil
	})
}

// HashSourceHandler answers GET /world/hashes?from=T: a line "tick shard
// hash-hex position" for every tick from T (default 1) that a shard's
// hash history still holds, up to the newest complete tick and at most
// maxHashTicks ticks, so that anyone can check the published hashes
// against a re-simulation of the log. src returning nil: 503.
func HashSourceHandler(src func() HashSource) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(rw, "GET only", http.StatusMethodNotAllowed)
			return
		}
		w := src()
		if w == nil {
			http.Error(rw, "no world is running", http.StatusServiceUnavailable)
			return
		}
		from := uint64(1)
		if v := r.URL.Query().Get("from"); v != "" {
			f, err := strconv.ParseUint(v, 10, 64)
			if err != nil || f == 0 {
				http.Error(rw, "from must be a tick (1 or more)", http.StatusBadRequest)
				return
			}
			from = f
		}
		to := min(w.Tick(), from+maxHashTicks-1)
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		bw := bufio.NewWriter(rw)
		defer bw.Flush()
		for t := from; t <= to; t++ {
			for shard := range uint32(w.Shards()) {
				if th, ok := w.Hashes(shard).Get(t); ok {
					fmt.Fprintf(bw, "%d %d %016x %d\n", t, shard, th.Hash, th.Pos)
				}
			}
		}
	})
}
