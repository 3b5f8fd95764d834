package hostile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/anoptic/broadside/lineage"
	"github.com/klauspost/compress/zstd"
)

// Tool runs the broadside CLI with args and returns its output, its peak
// RSS in bytes, and its error (non-nil when it exited non-zero).
type Tool func(ctx context.Context, args ...string) (out string, maxRSS int64, err error)

// ToolCommand runs the binary at path (with env added to the environment)
// as a Tool. The peak RSS is the process's own high-water mark (VmHWM of
// /proc/PID/status, read every 2 ms while it runs, so a peak in its last
// 2 ms may be missed): the rusage of a child started with vfork, as Go
// starts them, counts its parent's RSS before the exec.
func ToolCommand(path string, env ...string) Tool {
	return func(ctx context.Context, args ...string) (string, int64, error) {
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Env = append(os.Environ(), env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			return "", 0, err
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		status := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status"
		var peak int64
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			if hwm, ok := statusKB(status, "VmHWM:"); ok {
				peak = max(peak, hwm<<10)
			}
			select {
			case err := <-done:
				return out.String(), peak, err
			case <-t.C:
			}
		}
	}
}

// statusKB reads a "Name: N kB" line of a /proc status file.
func statusKB(path, name string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// FileTarget is the tools that read files from outside: recordings
// ('replay info', 'replay verify') and lineage stores ('lineage info').
type FileTarget struct {
	Tool Tool
	// Dir is where the hostile files are written.
	Dir string
	// Recording is a real .bsr: its file header (a valid game and world)
	// opens the hostile recordings, so that their chunks are what the
	// reader meets.
	Recording string
	// MaxRSS bounds a tool's peak RSS on a hostile file, in bytes.
	MaxRSS int64

	peak int64
}

// PeakRSS returns the highest peak RSS of a tool run on a hostile file.
func (f *FileTarget) PeakRSS() int64 { return f.peak }

// Prepare builds the hostile files (compressing them takes CPU, which
// must not be spent while the attacks on the server are timed).
func (f *FileTarget) Prepare() error {
	for name, build := range map[string]func() ([]byte, error){
		"garbage.bsr": func() ([]byte, error) { return randomBytes(64<<10, 8), nil },
		"flipped.bsr": func() ([]byte, error) {
			h, err := f.header()
			if err != nil {
				return nil, err
			}
			h[20] ^= 0x55
			return h, nil
		},
		"bomb.bsr": f.commandsBomb,
		"huge.bsr": f.hugeChunk,
	} {
		b, err := build()
		if err != nil {
			return fmt.Errorf("hostile: %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(f.Dir, name), b, 0o644); err != nil {
			return err
		}
	}
	for name, build := range map[string]func() ([]byte, lineage.RangeInfo, error){"lying": lyingRange, "bomb": bombRange} {
		b, info, err := build()
		if err != nil {
			return fmt.Errorf("hostile: lineage %s: %w", name, err)
		}
		dir := filepath.Join(f.Dir, "lineage-"+name)
		s, err := lineage.OpenPebble(dir, lineage.PebbleOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			return err
		}
		err = s.PutRange(context.Background(), info, b)
		if cerr := s.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// FileAttacks returns the attacks with hostile files (Prepare first).
func (f *FileTarget) FileAttacks() []Attack {
	return []Attack{
		{ClassFiles, ".bsr of random bytes (replay info)", func(ctx context.Context) (bool, string) {
			return f.tool(ctx, "garbage.bsr", []string{"replay", "info"}, "not a Broadside recording")
		}},
		{ClassFiles, ".bsr with its header checksum broken (replay verify)", func(ctx context.Context) (bool, string) {
			return f.tool(ctx, "flipped.bsr", []string{"replay", "verify"}, "corrupt", "checksum")
		}},
		{ClassFiles, ".bsr: 8M empty entries in 2 KB of zstd (replay verify)", func(ctx context.Context) (bool, string) {
			return f.tool(ctx, "bomb.bsr", []string{"replay", "verify"}, "budget")
		}},
		{ClassFiles, ".bsr: a chunk declaring 1 GiB (replay verify)", func(ctx context.Context) (bool, string) {
			// The reader drops what is not a chunk as a cut tail (a
			// recording whose writer crashed is read up to its last
			// whole chunk); with nothing left, verify fails.
			return f.tool(ctx, "huge.bsr", []string{"replay", "verify"}, "nothing to verify")
		}},
		{ClassFiles, "lineage range whose counts lie (lineage info)", func(ctx context.Context) (bool, string) {
			return f.run(ctx, []string{"lineage", "info", "--store", filepath.Join(f.Dir, "lineage-lying")}, "corrupt")
		}},
		{ClassFiles, "lineage range: 128 MiB of zeros in zstd (lineage info)", func(ctx context.Context) (bool, string) {
			return f.run(ctx, []string{"lineage", "info", "--store", filepath.Join(f.Dir, "lineage-bomb")}, "corrupt")
		}},
	}
}

// tool runs the tool on the prepared file name (args, then the file):
// rejected when the tool fails saying one of want, within MaxRSS.
func (f *FileTarget) tool(ctx context.Context, name string, args []string, want ...string) (bool, string) {
	return f.run(ctx, append(args, filepath.Join(f.Dir, name)), want...)
}

func (f *FileTarget) run(ctx context.Context, args []string, want ...string) (bool, string) {
	out, rss, err := f.Tool(ctx, args...)
	f.peak = max(f.peak, rss)
	last := lastLine(out)
	var exit *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		return false, err.Error()
	default:
		return false, fmt.Sprintf("the tool did not refuse the file: %s", last)
	}
	if !containsAny(out, want...) {
		return false, fmt.Sprintf("refused, but not saying %q: %s", want, last)
	}
	if f.MaxRSS > 0 && rss > f.MaxRSS {
		return false, fmt.Sprintf("refused, but after reaching %d MiB RSS (bound %d MiB): %s", rss>>20, f.MaxRSS>>20, last)
	}
	return true, fmt.Sprintf("exit %d, peak RSS %d MiB: %s", code, rss>>20, last)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// header returns the file header of the real recording (magic, version,
// body, checksum).
func (f *FileTarget) header() ([]byte, error) {
	r, err := os.Open(f.Recording)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	fixed := make([]byte, 16)
	if _, err := io.ReadFull(r, fixed); err != nil {
		return nil, fmt.Errorf("hostile: %s: %w", f.Recording, err)
	}
	n := binary.LittleEndian.Uint32(fixed[12:])
	if string(fixed[:8]) != "BSREPLAY" || n > 2<<20 {
		return nil, fmt.Errorf("hostile: %s is not a recording", f.Recording)
	}
	rest := make([]byte, int(n)+4)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, fmt.Errorf("hostile: %s: %w", f.Recording, err)
	}
	return append(fixed, rest...), nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// chunk appends a .bsr chunk (replay/bsr's layout: magic "BSCK", kind,
// flags, reserved, shard, raw and stored length, reserved, first and last
// tick, aux1, aux2, payload, crc32c) whose payload is the zstd frame z of
// raw bytes.
func chunk(b []byte, kind uint8, raw uint32, first, last, aux1, aux2 uint64, z []byte) []byte {
	le := binary.LittleEndian
	start := len(b)
	b = append(b, "BSCK"...)
	b = append(b, kind, 0, 0, 0)
	b = le.AppendUint32(b, 0) // shard
	b = le.AppendUint32(b, raw)
	b = le.AppendUint32(b, uint32(len(z)))
	b = le.AppendUint32(b, 0)
	b = le.AppendUint64(b, first)
	b = le.AppendUint64(b, last)
	b = le.AppendUint64(b, aux1)
	b = le.AppendUint64(b, aux2)
	b = append(b, z...)
	return le.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

func compress(raw []byte) ([]byte, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return nil, err
	}
	defer enc.Close()
	return enc.EncodeAll(raw, nil), nil
}

// commandsBomb is a recording whose first commands chunk holds 8M-1
// empty entries (4 bytes each: 32 MiB raw, within the raw budget) that
// compress to a few KB; decoded, they would take about 400 MB.
func (f *FileTarget) commandsBomb() ([]byte, error) {
	h, err := f.header()
	if err != nil {
		return nil, err
	}
	const n = 8<<20 - 1
	raw := binary.AppendUvarint(make([]byte, 0, 4*n+8), n)
	for range n {
		raw = append(raw, 1, 0, 0, 0)
	}
	z, err := compress(raw)
	if err != nil {
		return nil, err
	}
	return chunk(h, 2 /* commands */, uint32(len(raw)), 1, 1, 0, n, z), nil
}

// hugeChunk is a recording whose chunk declares a 1 GiB payload.
func (f *FileTarget) hugeChunk() ([]byte, error) {
	h, err := f.header()
	if err != nil {
		return nil, err
	}
	z, _ := compress([]byte("x"))
	return chunk(h, 2, 1<<30, 1, 1, 0, 1, z), nil
}

// lineageRange encodes a lineage range the way lineage.EncodeRange lays
// one out (magic "BSLR", version 2, uvarint shard, first tick, ticks,
// inputs, events, raw length; the zstd body; crc32c), with whatever
// counts and body the attacker likes.
func lineageRange(firstTick, ticks, inputs, events, raw uint64, body []byte) []byte {
	b := append([]byte("BSLR"), 2)
	for _, v := range []uint64{0, firstTick, ticks, inputs, events, raw} {
		b = binary.AppendUvarint(b, v)
	}
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// lyingRange claims 65,536 ticks and 2^40 inputs in 100 bytes.
func lyingRange() ([]byte, lineage.RangeInfo, error) {
	z, err := compress(make([]byte, 100))
	if err != nil {
		return nil, lineage.RangeInfo{}, err
	}
	b := lineageRange(1, 1<<16, 1<<40, 0, 100, z)
	return b, lineage.RangeInfo{FirstTick: 1, LastTick: 1 << 16, Bytes: len(b)}, nil
}

// bombRange is one tick whose body is 128 MiB of zeros in a few KB of
// zstd, declaring as many raw bytes as the compression ratio bound lets.
func bombRange() ([]byte, lineage.RangeInfo, error) {
	z, err := compress(make([]byte, 128<<20))
	if err != nil {
		return nil, lineage.RangeInfo{}, err
	}
	b := lineageRange(1, 1, 0, 0, 256*uint64(len(z)), z)
	return b, lineage.RangeInfo{FirstTick: 1, LastTick: 1, Bytes: len(b)}, nil
}
