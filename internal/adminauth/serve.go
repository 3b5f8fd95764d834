package adminauth

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"
)

// Serve serves metrics on /metrics, /debug/pprof and extra on o.Addr
// (empty: nothing) until ctx ends, every handler behind the guard o
// describes; it refuses an address beyond loopback without a token.
func Serve(ctx context.Context, o Options, metrics http.Handler, log *slog.Logger, extra map[string]http.Handler) error {
	addr := o.Addr
	if addr == "" {
		return nil
	}
	guard, err := New(o)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	for path, h := range extra {
		mux.Handle(path, h)
	}
	srv := &http.Server{Addr: addr, Handler: guard.Wrap(mux), ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 2 * time.Minute}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			log.Error("admin server", "addr", addr, "err", err)
		}
	}()
	log.Info("admin", "metrics", "http://"+addr+"/metrics", "pprof", "http://"+addr+"/debug/pprof/", "bearer token", o.TokenFile != "")
	return nil
}
