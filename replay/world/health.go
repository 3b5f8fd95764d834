package world

import (
	"fmt"
	"net/http"
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
		w := world()
		if w == nil {
			http.Error(rw, "not ready: the world is not running (starting, or stopped)", http.StatusServiceUnavailable)
			return
		}
		if err := w.Ready(r.Context()); err != nil {
			http.Error(rw, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		for _, c := range checks {
			if err := c(); err != nil {
				http.Error(rw, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintf(rw, "ready: tick %d, %d sectors live\n", w.Tick(), w.cfg.Game.Shards)
	})
}
