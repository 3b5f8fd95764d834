package main

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
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
)

// A running server streams its command log on its admin address, so that
// 'broadside replay export --server' can record the match without access
// to the log cluster (which is embedded by default):
//
//	GET /replay/world          the world's configuration (broadside.Config binary)
//	GET /replay/log?to=P       entries 1..P (P: the tail when the request
//	                           arrived if absent), each: uvarint position,
//	                           uvarint client, uvarint sequence, uvarint
//	                           length, the record's bytes

// logStreamHandler serves the log and the world's configuration.
func logStreamHandler(game broadside.Config, log func() worldLog) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/world") {
			b, err := game.MarshalBinary()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Write(b)
			return
		}
		l := log()
		if l == nil {
			http.Error(w, "no log", http.StatusServiceUnavailable)
			return
		}
		ctx := r.Context()
		to, err := strconv.ParseUint(r.URL.Query().Get("to"), 10, 64)
		if err != nil || to == 0 {
			if to, err = l.CheckTail(ctx); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Broadside-Log-To", strconv.FormatUint(to, 10))
		bw := bufio.NewWriterSize(w, 64<<10)
		var hdr []byte
		for pos := uint64(1); pos <= to; {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			batch, err := l.Read(rctx, pos, int(min(to-pos+1, 4096)))
			cancel()
			if err != nil || len(batch) == 0 {
				// The status is sent; a short stream tells the client.
				return
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
	})
}

// httpLogSource is a replay.Source over a server's /replay/log stream. It
// validates what it reads: positions increasing, records no larger than an
// envelope may be.
type httpLogSource struct {
	body io.ReadCloser
	r    *bufio.Reader
	to   uint64
	last uint64
}

// openServerLogStream asks the server at admin for its world and its log
// up to its current tail.
func openServerLogStream(ctx context.Context, admin string) (*httpLogSource, broadside.Config, error) {
	var game broadside.Config
	base := strings.TrimSuffix(admin, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	get := func(path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return nil, err
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
		return nil, game, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, wire.MaxWelcomeWorld+1))
	resp.Body.Close()
	if err != nil {
		return nil, game, err
	}
	if err := game.UnmarshalBinary(b); err != nil {
		return nil, game, fmt.Errorf("server %s: its world: %w", base, err)
	}
	if resp, err = get("/replay/log"); err != nil {
		return nil, game, err
	}
	to, err := strconv.ParseUint(resp.Header.Get("X-Broadside-Log-To"), 10, 64)
	if err != nil {
		resp.Body.Close()
		return nil, game, fmt.Errorf("server %s: no log extent in the answer", base)
	}
	return &httpLogSource{body: resp.Body, r: bufio.NewReaderSize(resp.Body, 64<<10), to: to}, game, nil
}

// Next implements replay.Source.
func (s *httpLogSource) Next(ctx context.Context) (msg.Entry, error) {
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
func (s *httpLogSource) Close() error { return s.body.Close() }
