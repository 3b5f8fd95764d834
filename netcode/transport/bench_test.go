package transport

import (
	"bytes"
	"io"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Benchmarks run on loopback with default socket buffers. The machine is
// small and shared: compare runs with benchstat, quote medians and p99, not a
// lone number.

// reportLatency adds p50 and p99 of the per-operation latencies.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(q float64) float64 {
		return float64(lat[int(q*float64(len(lat)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), "p50-us")
	b.ReportMetric(at(0.99), "p99-us")
}

// BenchmarkRoundTrip is one request and its echoed response on one
// long-lived stream, one at a time (STACK-NOTES: ≈34 µs p50 for 1 KiB here).
func BenchmarkRoundTrip(b *testing.B) {
	for _, size := range []int{100, 1024} {
		b.Run(sizeName(size), func(b *testing.B) {
			srv := newEchoServer(b, nil)
			conn := dial(b, srv.Addr(), nil)
			st, err := conn.OpenStream(testCtx(b))
			if err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, size)
			buf := make([]byte, 0, size)
			roundTrip := func() {
				if err := st.WriteFrame(payload); err != nil {
					b.Fatal(err)
				}
				if buf, err = st.ReadFrame(buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
			for range 100 { // warm up: handshake done, windows grown, buffers sized
				roundTrip()
			}
			lat := make([]time.Duration, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				roundTrip()
				lat[i] = time.Since(start)
			}
			b.StopTimer()
			reportLatency(b, lat)
		})
	}
}

// BenchmarkFanout3 sends one request to three echo servers on three
// connections from one endpoint and waits for all three replies: the raw QUIC
// floor under a 1-RTT append to three sequencing replicas (STACK-NOTES: ≈82 µs
// p50 for 1 KiB here).
func BenchmarkFanout3(b *testing.B) {
	for _, size := range []int{100, 1024} {
		b.Run(sizeName(size), func(b *testing.B) {
			client := newEndpoint(b, func(c *Config) { c.ServerTLS = nil })
			streams := make([]*Stream, 3)
			for i := range streams {
				srv := newEchoServer(b, nil)
				conn, err := client.Dial(testCtx(b), srv.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				if streams[i], err = conn.OpenStream(testCtx(b)); err != nil {
					b.Fatal(err)
				}
			}
			payload := make([]byte, size)
			bufs := [3][]byte{make([]byte, 0, size), make([]byte, 0, size), make([]byte, 0, size)}
			fanout := func() {
				for _, st := range streams {
					if err := st.WriteFrame(payload); err != nil {
						b.Fatal(err)
					}
				}
				for i, st := range streams {
					var err error
					if bufs[i], err = st.ReadFrame(bufs[i][:0]); err != nil {
						b.Fatal(err)
					}
				}
			}
			for range 100 {
				fanout()
			}
			lat := make([]time.Duration, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				fanout()
				lat[i] = time.Since(start)
			}
			b.StopTimer()
			reportLatency(b, lat)
		})
	}
}

// BenchmarkOneWay100B pushes b.N 100-byte frames (a log append's size) one
// way on one stream; the clock stops when the receiver has read them all.
// "buffered" batches explicitly (BufferFrame, Flush at the end); "writeframe"
// relies on flush combining, with one or eight concurrent writers. With one
// writer and WriteFrame every frame is its own stream write, which shows
// what coalescing buys.
func BenchmarkOneWay100B(b *testing.B) {
	modes := []struct {
		name     string
		writers  int
		buffered bool
	}{
		{"buffered/writers=1", 1, true},
		{"writeframe/writers=1", 1, false},
		{"writeframe/writers=8", 8, false},
	}
	for _, mode := range modes {
		b.Run(mode.name, func(b *testing.B) {
			server := newEndpoint(b, nil)
			if err := server.Listen(); err != nil {
				b.Fatal(err)
			}
			conn := dial(b, server.Addr(), nil)
			st, err := conn.OpenStream(testCtx(b))
			if err != nil {
				b.Fatal(err)
			}
			// Open the stream on the server side with one frame.
			if err := st.WriteFrame([]byte("start")); err != nil {
				b.Fatal(err)
			}
			sconn, err := server.Accept(testCtx(b))
			if err != nil {
				b.Fatal(err)
			}
			sst, err := sconn.AcceptStream(testCtx(b))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := sst.ReadFrame(nil); err != nil {
				b.Fatal(err)
			}

			total := b.N
			received := make(chan error, 1)
			go func() {
				buf := make([]byte, 0, 128)
				for range total {
					var err error
					if buf, err = sst.ReadFrame(buf[:0]); err != nil {
						received <- err
						return
					}
				}
				received <- nil
			}()

			payload := bytes.Repeat([]byte{0x5a}, 100)
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for w := range mode.writers {
				n := total / mode.writers
				if w < total%mode.writers {
					n++
				}
				wg.Go(func() {
					for range n {
						var err error
						if mode.buffered {
							err = st.BufferFrame(payload)
						} else {
							err = st.WriteFrame(payload)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
					if err := st.Flush(); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			if err := <-received; err != nil {
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(total)/elapsed.Seconds(), "frames/s")
		})
	}
}

// BenchmarkFrameCodec100B is the CPU cost of framing alone (no network):
// encoding into a FrameWriter over io.Discard and decoding with a FrameReader.
func BenchmarkFrameCodec100B(b *testing.B) {
	payload := bytes.Repeat([]byte{0x5a}, 100)
	b.Run("write-buffered", func(b *testing.B) {
		fw := NewFrameWriter(io.Discard, 0)
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		for b.Loop() {
			if err := fw.BufferFrame(payload); err != nil {
				b.Fatal(err)
			}
		}
		if err := fw.Flush(); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("read", func(b *testing.B) {
		encoded := bytes.Repeat(encodeFrames(payload), 1024)
		r := bytes.NewReader(encoded)
		fr := NewFrameReader(r, 0)
		buf := make([]byte, 0, 128)
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i%1024 == 0 {
				r.Reset(encoded)
			}
			i++
			var err error
			if buf, err = fr.ReadFrame(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func sizeName(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return "size=" + strconv.Itoa(n/1024) + "KiB"
	}
	return "size=" + strconv.Itoa(n) + "B"
}
