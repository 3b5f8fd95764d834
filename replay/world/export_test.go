package world

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"strings"
	"testing"

	"github.com/anoptic/broadside/replay"
)

// A log stream from a hostile or broken server is refused entry by entry,
// never trusted.
func TestExportSourceValidates(t *testing.T) {
	entry := func(pos, client, seq, n uint64, data string) []byte {
		b := binary.AppendUvarint(nil, pos)
		b = binary.AppendUvarint(b, client)
		b = binary.AppendUvarint(b, seq)
		b = binary.AppendUvarint(b, n)
		return append(b, data...)
	}
	src := func(to uint64, parts ...[]byte) *ExportSource {
		body := io.NopCloser(bytes.NewReader(bytes.Join(parts, nil)))
		return &ExportSource{body: body, r: bufio.NewReader(body), to: to}
	}
	ctx := context.Background()
	good := src(2, entry(1, 7, 1, 2, "hi"), entry(2, 7, 2, 0, ""))
	for want := uint64(1); want <= 2; want++ {
		e, err := good.Next(ctx)
		if err != nil || e.Pos != want {
			t.Fatalf("entry %d: %+v %v", want, e, err)
		}
	}
	if _, err := good.Next(ctx); err != replay.ErrEndOfLog {
		t.Fatalf("after the last entry: %v", err)
	}
	for name, s := range map[string]*ExportSource{
		"position backwards": src(5, entry(2, 1, 1, 0, ""), entry(2, 1, 2, 0, "")),
		"past the extent":    src(1, entry(3, 1, 1, 0, "")),
		"huge record":        src(1, entry(1, 1, 1, 1<<40, "")),
		"cut record":         src(1, entry(1, 1, 1, 10, "abc")),
		"cut stream":         src(3, entry(1, 1, 1, 0, "")),
		"garbage":            src(3, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}),
	} {
		var err error
		for range 3 {
			if _, err = s.Next(ctx); err != nil {
				break
			}
		}
		if err == nil || err == replay.ErrEndOfLog || !strings.Contains(err.Error(), "log stream") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzExportSource feeds arbitrary bytes to the log stream decoder: it
// returns entries in increasing positions within the extent, or an error,
// and never panics or allocates past a record's bound.
func FuzzExportSource(f *testing.F) {
	f.Add([]byte{1, 7, 1, 2, 'h', 'i', 2, 7, 2, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		body := io.NopCloser(bytes.NewReader(b))
		s := &ExportSource{body: body, r: bufio.NewReader(body), to: 64}
		var last uint64
		for range 70 {
			e, err := s.Next(context.Background())
			if err != nil {
				return
			}
			if e.Pos <= last || e.Pos > 64 {
				t.Fatalf("position %d after %d", e.Pos, last)
			}
			last = e.Pos
		}
	})
}
