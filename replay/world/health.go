package world

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
)

// HealthHandler answers /healthz: the process is up (it answers at all).
func HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
}

// ReadyHandler answers /readyz with 200 "ready" when the world world
// returns is Ready (the log answers, every shard is live, the world
// ticks), else 503 and the reason; checks, if set, add conditions of the
// process around the world (a nil error: fine).
func ReadyHandler(world func() *World, checks ...func() error) http.Handler {
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
		w := world()
		if w == nil {
			http.Error(rw, "not ready: the world is not running (starting, or stopped)", http.StatusServiceUnavailable)
			return
		}
		if err := w.Ready(r.Context()); err != nil {
			http.Error(rw, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(rw, "ready: tick %d, %d sectors live\n", w.Tick(), w.cfg.Game.Shards)
	})
}

// maxHashTicks is the most ticks one /world/hashes answer lists.
const maxHashTicks = 10000

// HashesHandler answers GET /world/hashes?from=T: a line "tick shard
// hash-hex position" for every tick from T (default 1) that every shard's
// hash history still holds, up to the newest complete tick and at most
// maxHashTicks ticks, so that anyone can check the published hashes
// against a re-simulation of the log.
func HashesHandler(world func() *World) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(rw, "GET only", http.StatusMethodNotAllowed)
			return
		}
		w := world()
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
			for shard := range uint32(w.cfg.Game.Shards) {
				if th, ok := w.Hashes(shard).Get(t); ok {
					fmt.Fprintf(bw, "%d %d %016x %d\n", t, shard, th.Hash, th.Pos)
				}
			}
		}
	})
}
