package world

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/replay"
)

// fakeExportLog holds n entries of size bytes; block, if set, holds every
// Read until it is closed.
type fakeExportLog struct {
	n, size int
	reads   atomic.Int64
	block   chan struct{}
}

func (l *fakeExportLog) CheckTail(context.Context) (uint64, error) { return uint64(l.n), nil }

func (l *fakeExportLog) Read(ctx context.Context, from uint64, max int) ([]msg.Entry, error) {
	l.reads.Add(1)
	if l.block != nil {
		select {
		case <-l.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var out []msg.Entry
	for p := from; p <= uint64(l.n) && len(out) < max; p++ {
		out = append(out, msg.Entry{Pos: p, Record: msg.Record{ID: msg.RecordID{Client: 1, Seq: p}, Data: make([]byte, l.size)}})
	}
	return out, nil
}

// worldLogTrap is a world's log that an export must never read.
type worldLogTrap struct {
	Log
	t *testing.T
}

func (w worldLogTrap) Read(context.Context, uint64, int) ([]msg.Entry, error) {
	w.t.Error("the export read the world's own log")
	return nil, nil
}

func (w worldLogTrap) CheckTail(context.Context) (uint64, error) {
	w.t.Error("the export asked the world's own log")
	return 0, nil
}

func exportServer(t *testing.T, cfg ExportConfig) *httptest.Server {
	w := &World{cfg: Config{Log: worldLogTrap{t: t}, Game: Game{Config: []byte("cfg")}}}
	srv := httptest.NewServer(ExportHandler(func() *World { return w }, cfg))
	t.Cleanup(srv.Close)
	return srv
}

// TestExportReadsItsOwnLog: /replay/log streams through the export's own
// log client, never the world's.
func TestExportReadsItsOwnLog(t *testing.T) {
	l := &fakeExportLog{n: 1000, size: 40}
	srv := exportServer(t, ExportConfig{Log: func() ExportLog { return l }})
	src, cfg, err := OpenExport(context.Background(), srv.URL, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if string(cfg) != "cfg" {
		t.Fatalf("config %q", cfg)
	}
	n := 0
	for {
		_, err := src.Next(context.Background())
		if err == replay.ErrEndOfLog {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1000 || l.reads.Load() == 0 {
		t.Fatalf("%d entries, %d reads of the export log", n, l.reads.Load())
	}
}

// TestExportBudget: exports beyond MaxConcurrent are refused, and the
// byte budget holds an export back (at 1 KiB/s, 2 MB cannot stream in
// the half second a client waits).
func TestExportBudget(t *testing.T) {
	blocked := &fakeExportLog{n: 10, size: 10, block: make(chan struct{})}
	srv := exportServer(t, ExportConfig{Log: func() ExportLog { return blocked }, MaxConcurrent: 1})
	var wg sync.WaitGroup
	wg.Go(func() {
		resp, err := http.Get(srv.URL + "/replay/log")
		if err == nil {
			io.Copy(io.Discard, resp.Body) // hold the export open until it ends
			resp.Body.Close()
		}
	})
	for i := 0; blocked.reads.Load() == 0; i++ {
		if i > 1000 {
			t.Fatal("the first export never read")
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, err := http.Get(srv.URL + "/replay/log")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a second concurrent export: %s", resp.Status)
	}
	close(blocked.block)
	wg.Wait()

	slow := &fakeExportLog{n: 2000, size: 1000}
	srv2 := exportServer(t, ExportConfig{Log: func() ExportLog { return slow }, BytesPerSecond: 1024})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	src, _, err := OpenExport(ctx, srv2.URL, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	n := 0
	for ; ; n++ {
		if _, err := src.Next(ctx); err != nil {
			break
		}
	}
	if n >= 2000 {
		t.Fatalf("all %d entries streamed past a budget of 1 KiB/s", n)
	}
}
