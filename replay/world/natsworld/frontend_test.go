package natsworld

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/world"
)

// partFrame is a world.PartFrame that records its parts.
type partFrame struct {
	tick  uint64
	parts map[uint32]string
}

func (f *partFrame) AddShard(uint32, replay.Sim) {}
func (f *partFrame) Seal(world.Frame)            {}
func (f *partFrame) AddPart(shard uint32, part []byte) error {
	f.parts[shard] = string(part)
	return nil
}

// TestFrontEndAssembles feeds a front end the frames of 3 sectors, some
// late, out of order, duplicated, stale or missing, and checks the
// frames it assembles, in order, with the applied commands.
func TestFrontEndAssembles(t *testing.T) {
	frames := world.NewFrames(3, func(tick uint64) world.Frame { return &partFrame{tick: tick, parts: map[uint32]string{}} })
	var applied [][2]uint64
	frames.OnApplied(func(p uint32, seq uint64) { applied = append(applied, [2]uint64{uint64(p), seq}) })
	var published []uint64
	_, err := NewFrontEnd(FrontEndConfig{World: 1, Sectors: 3, Frames: frames, Conn: nil, Timeout: 100 * time.Millisecond,
		OnFrame: func(tick uint64) { published = append(published, tick) }})
	if err == nil {
		t.Fatal("a front end without a NATS connection")
	}
	fe, err := NewFrontEnd(FrontEndConfig{World: 1, Sectors: 3, Frames: frames, Conn: new(nats.Conn), Timeout: 100 * time.Millisecond,
		OnFrame: func(tick uint64) { published = append(published, tick) }})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	part := func(s uint32, tick uint64) []byte { return []byte{byte('a' + s), byte(tick)} }
	add := func(s uint32, tick, epoch uint64, at time.Duration) {
		f := SectorFrame{World: 1, Sector: s, Tick: tick, Epoch: epoch, Payload: part(s, tick)}
		if tick == 2 {
			f.Applied = []Applied{{Player: 7, Seq: 3}}
		}
		fe.Add(f, t0.Add(at))
	}
	want := func(tick uint64, parts ...string) {
		t.Helper()
		f, _ := frames.Frame(tick).(*partFrame)
		if f == nil {
			t.Fatalf("tick %d not assembled (latest %d)", tick, frames.Latest())
		}
		for s, p := range parts {
			if f.parts[uint32(s)] != p {
				t.Fatalf("tick %d sector %d: %q, want %q", tick, s, f.parts[uint32(s)], p)
			}
		}
	}
	// Tick 1 completes; tick 2's parts arrive out of order with a
	// duplicate.
	add(0, 1, 1, 0)
	add(1, 1, 1, 0)
	add(2, 1, 1, 0)
	add(2, 2, 1, 30*time.Millisecond)
	add(2, 2, 1, 30*time.Millisecond)
	add(0, 2, 1, 31*time.Millisecond)
	if frames.Latest() != 1 {
		t.Fatalf("latest %d before tick 2's last part", frames.Latest())
	}
	add(1, 2, 1, 32*time.Millisecond)
	want(1, "a\x01", "b\x01", "c\x01")
	want(2, "a\x02", "b\x02", "c\x02")
	// Sector 1 stops publishing (its worker died): ticks 3 and 4 wait for
	// it, then are assembled with its previous part.
	add(0, 3, 1, 60*time.Millisecond)
	add(2, 3, 1, 60*time.Millisecond)
	add(0, 4, 1, 90*time.Millisecond)
	add(2, 4, 1, 90*time.Millisecond)
	fe.expire(t0.Add(165 * time.Millisecond))
	if frames.Latest() != 3 {
		t.Fatalf("latest %d after tick 3 timed out (4 has not)", frames.Latest())
	}
	want(3, "a\x03", "b\x02", "c\x03")
	fe.expire(t0.Add(200 * time.Millisecond))
	want(4, "a\x04", "b\x02", "c\x04")
	// Its successor (epoch 2) publishes the ticks it missed (late), then
	// tick 5; the old owner, waking, is stale.
	add(1, 3, 2, 210*time.Millisecond)
	add(1, 5, 2, 210*time.Millisecond)
	add(1, 5, 1, 210*time.Millisecond)
	add(0, 5, 1, 211*time.Millisecond)
	add(2, 5, 1, 212*time.Millisecond)
	want(5, "a\x05", "b\x05", "c\x05")
	// A tick completing before an older one: the older is assembled first
	// (filled).
	add(0, 7, 1, 250*time.Millisecond)
	add(0, 6, 1, 250*time.Millisecond)
	add(1, 7, 2, 250*time.Millisecond)
	add(2, 7, 1, 250*time.Millisecond)
	want(6, "a\x06", "b\x05", "c\x05")
	want(7, "a\x07", "b\x07", "c\x07")

	st := fe.Stats()
	if !slices.Equal(published, []uint64{1, 2, 3, 4, 5, 6, 7}) || st.Ticks != 7 || st.Filled != 4 || st.Late != 1 || st.Stale != 1 || st.Latest != 7 {
		t.Fatalf("published %v, stats %+v", published, st)
	}
	if !slices.Equal(applied, [][2]uint64{{7, 3}}) {
		t.Fatalf("applied %v", applied)
	}
}

// TestFrontEndHashes: a front end keeps each sector's state hash per tick
// from its frames (a late part's too, a stale epoch's not), keeps the
// first of two frames that disagree and counts the conflict, and
// /world/hashes lists them up to the newest tick assembled.
func TestFrontEndHashes(t *testing.T) {
	frames := world.NewFrames(2, func(tick uint64) world.Frame { return &partFrame{tick: tick, parts: map[uint32]string{}} })
	fe, err := NewFrontEnd(FrontEndConfig{World: 1, Sectors: 2, Frames: frames, Conn: new(nats.Conn), Timeout: 100 * time.Millisecond, HashTicks: 64})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	add := func(s uint32, tick, epoch, hash uint64) {
		fe.Add(SectorFrame{World: 1, Sector: s, Tick: tick, Epoch: epoch, Pos: tick * 10, Hash: hash, Payload: []byte{1}}, t0)
	}
	add(0, 1, 2, 0x10)
	add(1, 1, 2, 0x11)
	add(0, 2, 2, 0x20)
	add(0, 3, 2, 0x30)
	add(1, 3, 2, 0x31) // tick 2 assembled without sector 1's part
	add(1, 2, 2, 0x21) // late: its hash still counts
	add(0, 2, 2, 0x99) // disagrees with the first: a conflict, not kept
	add(1, 4, 1, 0x41) // a stale epoch: neither assembled nor kept
	if st := fe.Stats(); st.HashConflicts != 1 || st.Latest != 3 || st.Late != 2 || st.Stale != 1 {
		t.Fatalf("stats %+v", st)
	}
	if th, ok := fe.Hashes(0).Get(2); !ok || th.Hash != 0x20 || th.Pos != 20 {
		t.Fatalf("sector 0 tick 2: %+v %v", th, ok)
	}
	if _, ok := fe.Hashes(1).Get(4); ok {
		t.Fatal("a stale frame's hash kept")
	}
	rec := httptest.NewRecorder()
	world.HashSourceHandler(func() world.HashSource { return fe }).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/world/hashes?from=2", nil))
	want := "2 0 0000000000000020 20\n2 1 0000000000000021 20\n3 0 0000000000000030 30\n3 1 0000000000000031 30\n"
	if rec.Code != http.StatusOK || rec.Body.String() != want {
		t.Fatalf("/world/hashes: %d\n%s\nwant\n%s", rec.Code, rec.Body, want)
	}
	rec = httptest.NewRecorder()
	world.HashSourceHandler(func() world.HashSource { return nil }).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/world/hashes", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("/world/hashes with no front end: %d", rec.Code)
	}
}
