package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"testing"
	"testing/iotest"
)

// fuzzFrameLimit is small so the fuzzer reaches the too-large branch easily.
const fuzzFrameLimit = 4096

// FuzzReadFrame feeds arbitrary bytes to a FrameReader. Seeds live in
// testdata/fuzz/FuzzReadFrame. For any input the reader must return exactly
// the frames the input encodes, then the one error that the first undecodable
// byte calls for (io.EOF, io.ErrUnexpectedEOF or ErrFrameTooLarge), behave the
// same whether the input arrives whole or one byte at a time, and never
// panic; writing the frames back must reproduce the consumed input.
func FuzzReadFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		frames, consumed, err := readAllFrames(newFrameReaderSize(bytes.NewReader(data), fuzzFrameLimit, 4096), len(data))
		// Byte by byte through the smallest bufio buffer (16 bytes): frames
		// straddle refills.
		frames1, consumed1, err1 := readAllFrames(newFrameReaderSize(iotest.OneByteReader(bytes.NewReader(data)), fuzzFrameLimit, 16), len(data))
		if consumed != consumed1 || len(frames) != len(frames1) || !sameErrorKind(err, err1) ||
			!slices.EqualFunc(frames, frames1, bytes.Equal) {
			t.Fatalf("whole input: %d frames, %d bytes, %v; byte by byte: %d frames, %d bytes, %v",
				len(frames), consumed, err, len(frames1), consumed1, err1)
		}

		// What the first undecoded byte calls for.
		rest := data[consumed:]
		var want error
		switch {
		case len(rest) == 0:
			want = io.EOF
		case len(rest) < FrameHeaderSize:
			want = io.ErrUnexpectedEOF
		case binary.BigEndian.Uint32(rest) > fuzzFrameLimit:
			want = ErrFrameTooLarge
		case uint64(len(rest)-FrameHeaderSize) < uint64(binary.BigEndian.Uint32(rest)):
			want = io.ErrUnexpectedEOF
		default:
			t.Fatalf("stopped with %v before a decodable frame at offset %d", err, consumed)
		}
		if !errors.Is(err, want) {
			t.Fatalf("at offset %d: got %v, want %v", consumed, err, want)
		}

		var out bytes.Buffer
		fw := NewFrameWriter(&out, fuzzFrameLimit)
		for _, frame := range frames {
			if len(frame) > fuzzFrameLimit {
				t.Fatalf("frame of %d bytes above the limit", len(frame))
			}
			if err := fw.BufferFrame(frame); err != nil {
				t.Fatal(err)
			}
		}
		if err := fw.Flush(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), data[:consumed]) {
			t.Fatal("re-encoded frames differ from the input they were read from")
		}
	})
}

// readAllFrames reads frames until an error, reusing one small buffer, and
// returns copies of the frames, the bytes they span and the final error. Every
// frame consumes at least a header, so inputLen/FrameHeaderSize+1 reads bound
// the loop.
func readAllFrames(fr *FrameReader, inputLen int) (frames [][]byte, consumed int, err error) {
	buf := make([]byte, 0, 16)
	for range inputLen/FrameHeaderSize + 1 {
		frame, err := fr.ReadFrame(buf[:0])
		if err != nil {
			return frames, consumed, err
		}
		frames = append(frames, bytes.Clone(frame))
		consumed += FrameHeaderSize + len(frame)
		buf = frame
	}
	frame, err := fr.ReadFrame(buf[:0])
	if err == nil {
		return frames, consumed, errors.New("more frames than the input can hold: " + string(frame))
	}
	return frames, consumed, err
}

func sameErrorKind(a, b error) bool {
	for _, kind := range []error{io.EOF, io.ErrUnexpectedEOF, ErrFrameTooLarge} {
		if errors.Is(a, kind) != errors.Is(b, kind) {
			return false
		}
	}
	return true
}
