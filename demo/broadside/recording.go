//go:build !js

package broadside

import (
	"fmt"

	"github.com/anoptic/broadside/replay/bsr"
	"github.com/anoptic/broadside/replay/world"
)

// OpenRecording opens a Broadside recording (its header names the game and
// carries the world's Config, so a reader needs no game flags) and returns
// its game and world configuration.
func OpenRecording(path string) (*bsr.Reader, world.Game, Config, error) {
	r, err := bsr.Open(path)
	if err != nil {
		return nil, world.Game{}, Config{}, err
	}
	h := r.Header()
	if h.Game != GameName {
		r.Close()
		return nil, world.Game{}, Config{}, fmt.Errorf("%s is a recording of %q, not of %s", path, h.Game, GameName)
	}
	game, cfg, err := GameOf(h.GameConfig)
	if err != nil {
		r.Close()
		return nil, world.Game{}, cfg, fmt.Errorf("%s: %w", path, err)
	}
	if uint32(game.Shards) != h.Shards {
		r.Close()
		return nil, world.Game{}, cfg, fmt.Errorf("%s: %d shards for a world of %d sectors", path, h.Shards, game.Shards)
	}
	return r, game, cfg, nil
}
