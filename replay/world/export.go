package world

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"golang.org/x/time/rate"
)

// A running world streams its command log over HTTP (a server's admin
// address), so that a recording can be exported without access to the log
// cluster (which is embedded by default):
//
//	GET /replay/world          the game's world configuration (Game.Config)
//	GET /replay/log?to=P       entries 1..P (P: the tail when the request
//	                           arrived if absent), each: uvarint position,
//	                           uvarint client, uvarint sequence, uvarint
//	                           length, the record's bytes
//
// The answer to /replay/log carries P in the header X-Broadside-Log-To.

// logToHeader carries the last position of a /replay/log answer.
const logToHeader = "X-Broadside-Log-To"

// ExportLog is what an export reads the log through.
type ExportLog interface {
	CheckTail(ctx context.Context) (uint64, error)
	Read(ctx context.Context, from uint64, max int) ([]msg.Entry, error)
}

// ExportConfig bounds what log exports may cost the world.
type ExportConfig struct {
	// Log returns the exports' own log client (nil while there is none:
	// exports are refused): never the world's, whose reads and tick
	// markers an export must not slow down.
	Log func() ExportLog
	// BytesPerSecond is the budget of all exports together, in record
	// bytes read (default 8 MiB/s, a burst of 1 MiB).
	BytesPerSecond int
	// MaxConcurrent bounds exports running at once (default 2); more are
	// refused with 503.
	MaxConcurrent int
}

// ExportHandler serves the log (read through cfg.Log, within cfg's
// budget) and the world's configuration of the world world returns (nil
// while there is none) under /replay/.
func ExportHandler(world func() *World, cfg ExportConfig) http.Handler {
	return LogExportHandler(func() ([]byte, bool) {
		if w := world(); w != nil {
			return w.cfg.Game.Config, true
		}
		return nil, false
	}, cfg)
}

// LogExportHandler serves what ExportHandler serves for a process that
// runs no World but has the world's log (a front end of a world whose
// sectors run elsewhere): gameConfig returns the game's world
// configuration (false while the world is not served: 503).
func LogExportHandler(gameConfig func() ([]byte, bool), cfg ExportConfig) http.Handler {
	if cfg.BytesPerSecond <= 0 {
		cfg.BytesPerSecond = 8 << 20
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 2
	}
	burst := min(cfg.BytesPerSecond, 1<<20)
	budget := rate.NewLimiter(rate.Limit(cfg.BytesPerSecond), burst)
	slots := make(chan struct{}, cfg.MaxConcurrent)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(rw, "GET only", http.StatusMethodNotAllowed)
			return
		}
		config, ok := gameConfig()
		if !ok {
			http.Error(rw, "no world is running", http.StatusServiceUnavailable)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/world") {
			rw.Write(config)
			return
		}
		var l ExportLog
		if cfg.Log != nil {
			l = cfg.Log()
		}
		if l == nil {
			http.Error(rw, "log export is off (no export log client)", http.StatusServiceUnavailable)
			return
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			http.Error(rw, fmt.Sprintf("%d exports already running", cfg.MaxConcurrent), http.StatusServiceUnavailable)
			return
		}
		streamLog(rw, r, l, budget)
	})
}

// exportBatch is the most entries one read of an export asks for.
const exportBatch = 256

func streamLog(rw http.ResponseWriter, r *http.Request, l ExportLog, budget *rate.Limiter) {
	ctx := r.Context()
	to, err := strconv.ParseUint(r.URL.Query().Get("to"), 10, 64)
	if err != nil || to == 0 {
		if to, err = l.CheckTail(ctx); err != nil {
			http.Error(rw, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	rw.Header().Set("Content-Type", "application/octet-stream")
	rw.Header().Set(logToHeader, strconv.FormatUint(to, 10))
	rw.WriteHeader(http.StatusOK)
	if f, ok := rw.(http.Flusher); ok {
		f.Flush() // the client learns the extent at once, whatever the budget
	}
	bw := bufio.NewWriterSize(rw, 64<<10)
	var hdr []byte
	for pos := uint64(1); pos <= to; {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		batch, err := l.Read(rctx, pos, int(min(to-pos+1, exportBatch)))
		cancel()
		if err != nil || len(batch) == 0 {
			// The status is sent; a short stream tells the client.
			return
		}
		// Pay for what was read before reading more: the budget bounds
		// the exports' reads of the log, in bytes.
		n := 0
		for _, e := range batch {
			n += len(e.Record.Data) + 16
		}
		for n > 0 {
			c := min(n, budget.Burst())
			if err := budget.WaitN(ctx, c); err != nil {
				return
			}
			n -= c
		}
		for _, e := range batch {
			if e.Pos > to {
				break
			}
			hdr = binary.AppendUvarint(hdr[:0], e.Pos)
			hdr = binary.AppendUvarint(hdr, e.Record.ID.Client)
			hdr = binary.AppendUvarint(hdr, e.Record.ID.Seq)
			hdr = binary.AppendUvarint(hdr, uint64(len(e.Record.Data)))
			bw.Write(hdr)
			if _, err := bw.Write(e.Record.Data); err != nil {
				return
			}
		}
		pos = batch[len(batch)-1].Pos + 1
	}
	bw.Flush()
}

// ExportSource is a replay.Source over a server's /replay/log stream. It
// validates what it reads: positions increasing, records no larger than an
// envelope may be.
type ExportSource struct {
	body io.ReadCloser
	r    *bufio.Reader
	to   uint64
	last uint64
}

// OpenExport asks the server at admin (host:port or a URL) for its world's
// configuration (at most maxConfig bytes) and its log up to its current
// tail.
func OpenExport(ctx context.Context, admin string, maxConfig int) (src *ExportSource, config []byte, err error) {
	return OpenExportWithToken(ctx, admin, "", maxConfig)
}

// OpenExportWithToken is OpenExport with the admin bearer token (serve
// --admin-token-file; "" sends none).
func OpenExportWithToken(ctx context.Context, admin, token string, maxConfig int) (src *ExportSource, config []byte, err error) {
	base := strings.TrimSuffix(admin, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	get := func(path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return nil, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("server %s: %w", base, err)
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			return nil, fmt.Errorf("server %s%s: %s: %s", base, path, resp.Status, strings.TrimSpace(string(b)))
		}
		return resp, nil
	}
	resp, err := get("/replay/world")
	if err != nil {
		return nil, nil, err
	}
	config, err = io.ReadAll(io.LimitReader(resp.Body, int64(maxConfig)+1))
	resp.Body.Close()
	if err != nil {
		return nil, nil, err
	}
	if len(config) > maxConfig {
		return nil, nil, fmt.Errorf("server %s: a world configuration over %d bytes", base, maxConfig)
	}
	if resp, err = get("/replay/log"); err != nil {
		return nil, nil, err
	}
	to, err := strconv.ParseUint(resp.Header.Get(logToHeader), 10, 64)
	if err != nil {
		resp.Body.Close()
		return nil, nil, fmt.Errorf("server %s: no log extent in the answer", base)
	}
	return &ExportSource{body: resp.Body, r: bufio.NewReaderSize(resp.Body, 64<<10), to: to}, config, nil
}

// To returns the last position the stream delivers.
func (s *ExportSource) To() uint64 { return s.to }

// Next implements replay.Source.
func (s *ExportSource) Next(ctx context.Context) (msg.Entry, error) {
	if err := ctx.Err(); err != nil {
		return msg.Entry{}, err
	}
	if s.last >= s.to {
		return msg.Entry{}, replay.ErrEndOfLog
	}
	var v [4]uint64
	for i := range v {
		x, err := binary.ReadUvarint(s.r)
		if err != nil {
			if errors.Is(err, io.EOF) && i == 0 {
				return msg.Entry{}, fmt.Errorf("the server's log stream ended at position %d of %d", s.last, s.to)
			}
			return msg.Entry{}, fmt.Errorf("the server's log stream after position %d: %w", s.last, err)
		}
		v[i] = x
	}
	pos, client, seq, n := v[0], v[1], v[2], v[3]
	switch {
	case pos <= s.last || pos > s.to:
		return msg.Entry{}, fmt.Errorf("the server's log stream: position %d after %d (up to %d)", pos, s.last, s.to)
	case n > wire.MaxEnvelopeSize:
		return msg.Entry{}, fmt.Errorf("the server's log stream: a record of %d bytes at position %d", n, pos)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(s.r, data); err != nil {
		return msg.Entry{}, fmt.Errorf("the server's log stream at position %d: %w", pos, err)
	}
	s.last = pos
	return msg.Entry{Pos: pos, Record: msg.Record{ID: msg.RecordID{Client: client, Seq: seq}, Data: data}}, nil
}

// Close ends the stream.
func (s *ExportSource) Close() error { return s.body.Close() }
