package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"sync"
	"testing"
	"testing/iotest"

	"pgregory.net/rapid"
)

func encodeFrames(frames ...[]byte) []byte {
	var out []byte
	for _, f := range frames {
		out = binary.BigEndian.AppendUint32(out, uint32(len(f)))
		out = append(out, f...)
	}
	return out
}

func TestReadFrameTruncated(t *testing.T) {
	good := []byte("hello")
	tests := []struct {
		name   string
		input  []byte
		frames int   // complete frames expected before the error
		want   error // final error
	}{
		{"empty input is a clean EOF", nil, 0, io.EOF},
		{"one frame then clean EOF", encodeFrames(good), 1, io.EOF},
		{"zero-length frame", encodeFrames(nil, good), 2, io.EOF},
		{"header cut after 1 byte", []byte{0}, 0, io.ErrUnexpectedEOF},
		{"header cut after 3 bytes", []byte{0, 0, 0}, 0, io.ErrUnexpectedEOF},
		{"payload cut short", encodeFrames(good)[:7], 0, io.ErrUnexpectedEOF},
		{"payload missing entirely", encodeFrames(good)[:4], 0, io.ErrUnexpectedEOF},
		{"good frame then partial header", append(encodeFrames(good), 0, 0), 1, io.ErrUnexpectedEOF},
		{"good frame then partial payload", append(encodeFrames(good), encodeFrames(good)[:6]...), 1, io.ErrUnexpectedEOF},
		{"oversized header", []byte{0, 0, 0x10, 0x01}, 0, ErrFrameTooLarge},
		{"oversized after good frame", append(encodeFrames(good), 0xff, 0xff, 0xff, 0xff), 1, ErrFrameTooLarge},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":   func(r io.Reader) io.Reader { return r },
		"onebyte": iotest.OneByteReader,
		"half":    iotest.HalfReader,
		"dataerr": iotest.DataErrReader,
	}
	for _, tc := range tests {
		for rname, wrap := range readers {
			t.Run(tc.name+"/"+rname, func(t *testing.T) {
				fr := NewFrameReader(wrap(bytes.NewReader(tc.input)), 4096)
				var buf []byte
				for i := range tc.frames {
					frame, err := fr.ReadFrame(buf[:0])
					if err != nil {
						t.Fatalf("frame %d: %v", i, err)
					}
					buf = frame
				}
				_, err := fr.ReadFrame(buf[:0])
				if !errors.Is(err, tc.want) {
					t.Fatalf("got error %v, want %v", err, tc.want)
				}
				// Errors are sticky: the reader does not resynchronise.
				_, err2 := fr.ReadFrame(nil)
				if !errors.Is(err2, tc.want) {
					t.Fatalf("second read: got %v, want %v", err2, tc.want)
				}
			})
		}
	}
}

func TestReadFrameTooLargeDoesNotAllocatePayload(t *testing.T) {
	input := []byte{0xff, 0xff, 0xff, 0xff} // announces 4 GiB - 1
	fr := NewFrameReader(bytes.NewReader(input), DefaultMaxFrameSize)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := fr.ReadFrame(nil)
	runtime.ReadMemStats(&after)
	var tooLarge *FrameTooLargeError
	if !errors.As(err, &tooLarge) || !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want *FrameTooLargeError", err)
	}
	if tooLarge.Size != 0xffffffff || tooLarge.Limit != DefaultMaxFrameSize {
		t.Fatalf("error carries size %d limit %d", tooLarge.Size, tooLarge.Limit)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 64<<10 {
		t.Fatalf("rejecting an oversized frame allocated %d bytes", allocated)
	}
}

func TestReadFrameReusesBuffer(t *testing.T) {
	fr := NewFrameReader(bytes.NewReader(encodeFrames([]byte("abc"), []byte("defgh"), make([]byte, 100))), 0)
	buf := make([]byte, 0, 16)
	f1, err := fr.ReadFrame(buf)
	if err != nil || string(f1) != "abc" {
		t.Fatalf("frame 1: %q %v", f1, err)
	}
	if &f1[:1][0] != &buf[:1][0] {
		t.Fatal("frame 1 did not reuse the buffer")
	}
	f2, err := fr.ReadFrame(f1[:0])
	if err != nil || string(f2) != "defgh" {
		t.Fatalf("frame 2: %q %v", f2, err)
	}
	if &f2[:1][0] != &buf[:1][0] {
		t.Fatal("frame 2 did not reuse the buffer")
	}
	f3, err := fr.ReadFrame(f2[:0])
	if err != nil || len(f3) != 100 {
		t.Fatalf("frame 3: %d bytes, %v", len(f3), err)
	}
	if _, err := fr.ReadFrame(f3[:0]); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
}

func TestFrameBuffered(t *testing.T) {
	// A pipe delivers exactly what each Write carries, so the test controls
	// what the bufio.Reader holds.
	pr, pw := io.Pipe()
	defer pr.Close()
	fr := NewFrameReader(pr, 1024)
	if fr.FrameBuffered() {
		t.Fatal("nothing buffered yet")
	}
	frames := encodeFrames([]byte("one"), []byte("two"))
	partial := encodeFrames([]byte("three"))[:6]
	go func() {
		_, _ = pw.Write(append(frames, partial...))
	}()
	for _, want := range []string{"one", "two"} {
		frame, err := fr.ReadFrame(nil)
		if err != nil || string(frame) != want {
			t.Fatalf("got %q %v, want %q", frame, err, want)
		}
		if want == "one" && !fr.FrameBuffered() {
			t.Fatal("frame two arrived in the same write and should be buffered")
		}
	}
	if fr.FrameBuffered() {
		t.Fatal("a partial frame is not a buffered frame")
	}
	go func() {
		_, _ = pw.Write(encodeFrames([]byte("three"))[6:])
		_ = pw.Close()
	}()
	if frame, err := fr.ReadFrame(nil); err != nil || string(frame) != "three" {
		t.Fatalf("got %q %v", frame, err)
	}
}

func TestWriteFrameTooLarge(t *testing.T) {
	var out bytes.Buffer
	fw := NewFrameWriter(&out, 16)
	err := fw.WriteFrame(make([]byte, 17))
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want ErrFrameTooLarge", err)
	}
	if err := fw.BufferFrame(make([]byte, 17)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("BufferFrame: got %v, want ErrFrameTooLarge", err)
	}
	if out.Len() != 0 || fw.Buffered() != 0 {
		t.Fatal("a rejected frame was written")
	}
	// Rejection is not sticky: the stream is still aligned.
	if err := fw.WriteFrame(make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 20 {
		t.Fatalf("wrote %d bytes, want 20", out.Len())
	}
}

// gatedWriter records every Write; the first Write blocks until released.
type gatedWriter struct {
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	writes  [][]byte
	once    sync.Once
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.release
	})
	g.mu.Lock()
	g.writes = append(g.writes, bytes.Clone(p))
	g.mu.Unlock()
	return len(p), nil
}

func TestFrameWriterCoalescesBehindWriteInFlight(t *testing.T) {
	g := &gatedWriter{entered: make(chan struct{}), release: make(chan struct{})}
	fw := NewFrameWriter(g, 0)
	firstDone := make(chan error, 1)
	go func() { firstDone <- fw.WriteFrame([]byte("first")) }()
	<-g.entered // the first caller is now the flusher, blocked inside Write

	const queued = 50
	for i := range queued {
		// Returns at once: the flusher in progress will write it.
		if err := fw.WriteFrame([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := fw.Buffered(); got != queued*(FrameHeaderSize+1) {
		t.Fatalf("buffered %d bytes, want %d", got, queued*(FrameHeaderSize+1))
	}
	close(g.release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if err := fw.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(g.writes) != 2 {
		t.Fatalf("%d underlying writes, want 2 (one in flight, then one batch)", len(g.writes))
	}
	fr := NewFrameReader(bytes.NewReader(bytes.Join(g.writes, nil)), 0)
	if f, err := fr.ReadFrame(nil); err != nil || string(f) != "first" {
		t.Fatalf("first frame %q %v", f, err)
	}
	for i := range queued {
		f, err := fr.ReadFrame(nil)
		if err != nil || len(f) != 1 || f[0] != byte(i) {
			t.Fatalf("frame %d: %v %v", i, f, err)
		}
	}
}

func TestFrameWriterFlushWaitsForWriteInFlight(t *testing.T) {
	g := &gatedWriter{entered: make(chan struct{}), release: make(chan struct{})}
	fw := NewFrameWriter(g, 0)
	go func() { _ = fw.WriteFrame([]byte("first")) }()
	<-g.entered
	if err := fw.BufferFrame([]byte("second")); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- fw.Flush() }()
	close(g.release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	// Flush returned, so "second" must have been handed to the writer.
	g.mu.Lock()
	all := bytes.Join(g.writes, nil)
	g.mu.Unlock()
	if !bytes.Equal(all, encodeFrames([]byte("first"), []byte("second"))) {
		t.Fatalf("after Flush the writer holds %q", all)
	}
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

func TestFrameWriterErrorIsSticky(t *testing.T) {
	boom := errors.New("boom")
	fw := NewFrameWriter(failingWriter{boom}, 0)
	if err := fw.WriteFrame([]byte("x")); !errors.Is(err, boom) {
		t.Fatalf("got %v, want boom", err)
	}
	if err := fw.BufferFrame([]byte("y")); !errors.Is(err, boom) {
		t.Fatalf("BufferFrame after failure: got %v", err)
	}
	if err := fw.Flush(); !errors.Is(err, boom) {
		t.Fatalf("Flush after failure: got %v", err)
	}
}

func TestBufferFrameWritesOnlyAtThresholdOrFlush(t *testing.T) {
	var out bytes.Buffer
	fw := NewFrameWriter(&out, 0)
	frame := make([]byte, 100)
	for range 10 {
		if err := fw.BufferFrame(frame); err != nil {
			t.Fatal(err)
		}
	}
	if out.Len() != 0 {
		t.Fatalf("BufferFrame wrote %d bytes below the threshold", out.Len())
	}
	if err := fw.Flush(); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 10*104 {
		t.Fatalf("after Flush: %d bytes, want %d", out.Len(), 10*104)
	}
	out.Reset()
	for range flushThreshold/104 + 1 {
		if err := fw.BufferFrame(frame); err != nil {
			t.Fatal(err)
		}
	}
	if out.Len() < flushThreshold {
		t.Fatalf("crossing the threshold wrote only %d bytes", out.Len())
	}
}

// TestFrameRoundTripProperty: any sequence of frames written with any mix of
// WriteFrame, BufferFrame and Flush reads back identically, whatever the read
// chunking.
func TestFrameRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		const limit = 3000
		frames := rapid.SliceOfN(rapid.SliceOfN(rapid.Byte(), 0, limit), 0, 60).Draw(rt, "frames")
		modes := rapid.SliceOfN(rapid.IntRange(0, 2), len(frames), len(frames)).Draw(rt, "modes")
		var out bytes.Buffer
		fw := NewFrameWriter(&out, limit)
		for i, f := range frames {
			var err error
			switch modes[i] {
			case 0:
				err = fw.WriteFrame(f)
			case 1:
				err = fw.BufferFrame(f)
			case 2:
				if err = fw.BufferFrame(f); err == nil {
					err = fw.Flush()
				}
			}
			if err != nil {
				rt.Fatal(err)
			}
		}
		if err := fw.Flush(); err != nil {
			rt.Fatal(err)
		}
		chunking := rapid.SampledFrom([]string{"whole", "onebyte", "half"}).Draw(rt, "chunking")
		var r io.Reader = bytes.NewReader(out.Bytes())
		switch chunking {
		case "onebyte":
			r = iotest.OneByteReader(r)
		case "half":
			r = iotest.HalfReader(r)
		}
		fr := newFrameReaderSize(r, limit, rapid.SampledFrom([]int{16, 100, readBufferSize}).Draw(rt, "readbuffer"))
		buf := make([]byte, 0, rapid.IntRange(0, 64).Draw(rt, "bufcap"))
		for i, want := range frames {
			got, err := fr.ReadFrame(buf[:0])
			if err != nil {
				rt.Fatalf("frame %d: %v", i, err)
			}
			if !bytes.Equal(got, want) {
				rt.Fatalf("frame %d: got %d bytes, want %d", i, len(got), len(want))
			}
			buf = got
		}
		if _, err := fr.ReadFrame(buf[:0]); err != io.EOF {
			rt.Fatalf("after last frame: %v, want io.EOF", err)
		}
	})
}

func TestFrameWriterConcurrentWritersDoNotInterleave(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return out.Write(p)
	})
	fw := NewFrameWriter(w, 0)
	const writers, perWriter = 8, 500
	var wg sync.WaitGroup
	for id := range writers {
		wg.Go(func() {
			for seq := range perWriter {
				frame := make([]byte, 8+seq%37)
				binary.BigEndian.PutUint32(frame, uint32(id))
				binary.BigEndian.PutUint32(frame[4:], uint32(seq))
				var err error
				if id%2 == 0 {
					err = fw.WriteFrame(frame)
				} else {
					err = fw.BufferFrame(frame)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
			if err := fw.Flush(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	next := make([]int, writers)
	fr := NewFrameReader(bytes.NewReader(out.Bytes()), 0)
	for range writers * perWriter {
		f, err := fr.ReadFrame(nil)
		if err != nil {
			t.Fatal(err)
		}
		id, seq := binary.BigEndian.Uint32(f), binary.BigEndian.Uint32(f[4:])
		if int(seq) != next[id] || len(f) != 8+int(seq)%37 {
			t.Fatalf("writer %d: got seq %d (len %d), want %d", id, seq, len(f), next[id])
		}
		next[id]++
	}
	if _, err := fr.ReadFrame(nil); err != io.EOF {
		t.Fatalf("trailing data: %v", err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// scriptedReader returns its chunks one per Read; a nil chunk means "fail this
// Read with errTimeout".
type scriptedReader struct{ chunks [][]byte }

var errTimeout = errors.New("timeout")

func (s *scriptedReader) Read(p []byte) (int, error) {
	if len(s.chunks) == 0 {
		return 0, io.EOF
	}
	chunk := s.chunks[0]
	s.chunks = s.chunks[1:]
	if chunk == nil {
		return 0, errTimeout
	}
	return copy(p, chunk), nil
}

func TestReadErrorBetweenFramesIsRetryable(t *testing.T) {
	second := encodeFrames([]byte("second"))
	r := &scriptedReader{chunks: [][]byte{
		append(encodeFrames([]byte("first")), second[:2]...), // frame 1 and half a header
		nil, // the read deadline strikes inside the header
		second[2:],
	}}
	fr := NewFrameReader(r, 0)
	if f, err := fr.ReadFrame(nil); err != nil || string(f) != "first" {
		t.Fatalf("first: %q %v", f, err)
	}
	if _, err := fr.ReadFrame(nil); !errors.Is(err, errTimeout) {
		t.Fatalf("want the timeout, got %v", err)
	}
	if f, err := fr.ReadFrame(nil); err != nil || string(f) != "second" {
		t.Fatalf("retry after the timeout: %q %v", f, err)
	}
}

func TestReadErrorInsidePayloadIsSticky(t *testing.T) {
	frame := encodeFrames([]byte("payload"))
	r := &scriptedReader{chunks: [][]byte{frame[:6], nil, frame[6:]}}
	fr := NewFrameReader(r, 0)
	if _, err := fr.ReadFrame(nil); !errors.Is(err, errTimeout) {
		t.Fatalf("want the timeout, got %v", err)
	}
	if _, err := fr.ReadFrame(nil); !errors.Is(err, errTimeout) {
		t.Fatalf("a reader that lost frame alignment must stay failed, got %v", err)
	}
}
