package viewer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
)

// recordTestMatch writes the shared test match as a recording.
func recordTestMatch(t *testing.T) (string, *MatchSource) {
	t.Helper()
	src := testMatch(t)
	path := filepath.Join(t.TempDir(), "match.bsr")
	st, err := src.WriteRecording(context.Background(), path, bsr.SnapshotPolicy{FullEvery: 300, DeltaEvery: 60})
	if err != nil {
		t.Fatal(err)
	}
	first, last := src.Ticks()
	if st.FirstTick != first || st.LastTick != last {
		t.Fatalf("recorded ticks %d..%d of %d..%d", st.FirstTick, st.LastTick, first, last)
	}
	return path, src
}

// TestRecordingMatchesTheMatch: a recording of the test match shows, at
// every tick sought, the frames the match had, verifies, and answers Why
// like the match's own lineage (up to log positions, which the recording's
// tick markers shift).
func TestRecordingMatchesTheMatch(t *testing.T) {
	path, match := recordTestMatch(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, err := OpenRecording(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	if a, b := rec.Ticks(); a != 1 || b != 900 {
		t.Fatalf("recording ticks %d..%d", a, b)
	}
	if w := rec.World(); w.Width != match.World().Width || len(w.Islands) != len(match.World().Islands) {
		t.Fatalf("world %+v", w)
	}
	same := func(tick uint64) {
		t.Helper()
		if err := match.Seek(tick); err != nil {
			t.Fatal(err)
		}
		want, got := match.Frame(), rec.Frame()
		if got.Tick != tick || len(got.Ships) != len(want.Ships) || len(got.Balls) != len(want.Balls) {
			t.Fatalf("tick %d: recording at %d with %d ships %d balls; match %d ships %d balls",
				tick, got.Tick, len(got.Ships), len(got.Balls), len(want.Ships), len(want.Balls))
		}
		for i := range want.Ships {
			if got.Ships[i] != want.Ships[i] {
				t.Fatalf("tick %d: ship %+v, match has %+v", tick, got.Ships[i], want.Ships[i])
			}
		}
	}
	for _, tick := range []uint64{1, 450, 17, 899, 300, 301} {
		if err := rec.Seek(tick); err != nil {
			t.Fatal(err)
		}
		same(tick)
	}
	if err := rec.Step(); err != nil {
		t.Fatal(err)
	}
	same(302)

	v, err := rec.WaitVerified(ctx)
	if err != nil || v.State != VerifyOK {
		t.Fatalf("verification %+v, %v", v, err)
	}
	// Why of a sunk ship: the same killer and hits as the match's lineage.
	s := sinkingAt(t, match)
	for _, src := range []Source{match, rec} {
		if err := src.Seek(s.Tick + 3); err != nil {
			t.Fatal(err)
		}
	}
	ship := broadside.ShipID(s.Player)
	explain := func(src Source) *Explanation {
		v, _ := src.Frame().Ship(ship)
		r, err := src.Why(ship, s.Tick+3, WhyDepth)
		if err != nil {
			t.Fatal(err)
		}
		return Explain(r, v, src)
	}
	a, b := explain(match), explain(rec)
	if !b.Sunk || b.SunkAt != a.SunkAt || len(b.Hits) != len(a.Hits) || b.Hits[0].Shooter != a.Hits[0].Shooter || b.SunkBy[0].Player != a.SunkBy[0].Player {
		t.Fatalf("recording: sunk %v at %d, %d hits, killer %+v; match: at %d, %d hits, killer %+v",
			b.Sunk, b.SunkAt, len(b.Hits), b.SunkBy, a.SunkAt, len(a.Hits), a.SunkBy)
	}
	if len(b.Causes) != len(a.Causes) {
		t.Fatalf("recording finds %d commands, the match %d", len(b.Causes), len(a.Causes))
	}
}

// skewedSector reports a wrong state hash for tick skewFrom (not a
// snapshot tick, whose hash would make the snapshot look corrupt instead):
// recordings made with it do not verify there.
type skewedSector struct{ *broadside.Sector }

const skewFrom = 500

func (s skewedSector) Hash() uint64 {
	if s.Tick() == skewFrom {
		return s.Sector.Hash() ^ 0x5eed
	}
	return s.Sector.Hash()
}

// TestRecordingThatDoesNotVerify: a recording whose hashes the game does
// not reproduce fails verification at the first such tick, with a
// warning band; seeking past it reports the divergence.
func TestRecordingThatDoesNotVerify(t *testing.T) {
	src := testMatch(t)
	path := filepath.Join(t.TempDir(), "skewed.bsr")
	_, err := src.writeRecording(context.Background(), path, bsr.SnapshotPolicy{FullEvery: 300, DeltaEvery: 60},
		func(shard uint32) (replay.TableSim, error) {
			s, err := broadside.NewSector(src.Config(), int(shard))
			return skewedSector{s}, err
		})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, err := OpenRecording(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	m := NewModel(rec, screenW, screenH)
	m.SeekTo(skewFrom - 20) // before the skew: fine
	if m.Err() != nil || m.Tick() != skewFrom-20 {
		t.Fatalf("seek before the divergence: tick %d, %v", m.Tick(), m.Err())
	}
	v, err := rec.WaitVerified(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != VerifyFailed || !strings.Contains(v.Detail, fmt.Sprintf("tick %d", skewFrom)) {
		t.Fatalf("verification %+v, want a failure at tick %d", v, skewFrom)
	}
	sc := m.Scene()
	band, ok := sc.Find(RoleWarning, 0)
	if !ok || !strings.Contains(strings.Join(sc.Texts(band.Rect), " "), "does not verify") {
		t.Fatal("no warning band")
	}
	m.SeekTo(skewFrom) // the seeker checks the hash of the tick it lands on
	if !errors.Is(m.Err(), bsr.ErrDiverged) {
		t.Fatalf("seek past the divergence: %v", m.Err())
	}
}

func TestOpenRecordingErrors(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.bsr")
	if err := os.WriteFile(junk, []byte("not a recording at all, not even close"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{junk, filepath.Join(dir, "missing.bsr")} {
		if _, err := OpenRecording(context.Background(), p); err == nil || !strings.Contains(err.Error(), filepath.Base(p)) && !os.IsNotExist(err) {
			t.Fatalf("open %s: %v", p, err)
		}
	}
}
