package viewer

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/anoptic/broadside/demo/broadside"
)

// TestForkPairSwitch opens a recording and a fork of it without one
// player, and switches between them with KeySwitch at the same tick: the
// frames differ after the fork tick, and switching back restores the
// original's.
func TestForkPairSwitch(t *testing.T) {
	path, _ := recordTestMatch(t)
	ctx := context.Background()
	orig, err := OpenRecording(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	first, last := orig.Ticks()
	at := first + (last-first)/3
	if err := orig.Seek(at); err != nil {
		t.Fatal(err)
	}
	player := orig.Frame().Ships[0].Player
	forkPath := filepath.Join(t.TempDir(), "fork.bsr")
	if _, _, err := broadside.ForkRecording(ctx, broadside.ForkOptions{In: path, Out: forkPath, At: at, Without: []string{fmt.Sprint(player)}}); err != nil {
		t.Fatal(err)
	}
	fork, err := OpenRecording(ctx, forkPath)
	if err != nil {
		t.Fatal(err)
	}
	pair := NewForkPair(orig, fork)
	defer pair.Close()
	m := NewModel(pair, 800, 600)
	m.SeekTo(last)
	want := *pair.Frame()
	want.Ships = append([]broadside.ShipView(nil), want.Ships...)
	m.Key(KeySwitch)
	if pair.Showing() != 1 || pair.Frame().Tick != last {
		t.Fatalf("after the switch: showing %d at tick %d", pair.Showing(), pair.Frame().Tick)
	}
	if reflect.DeepEqual(want.Ships, pair.Frame().Ships) {
		t.Fatal("the fork without a player shows the same ships as the original")
	}
	m.Key(KeySwitch)
	if pair.Showing() != 0 || !reflect.DeepEqual(want.Ships, pair.Frame().Ships) {
		t.Fatal("switching back does not show the original")
	}
}
