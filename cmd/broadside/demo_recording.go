package main

import (
	"context"
	"errors"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
)

// writeMatchRecording writes the match in entries (through tick final) as
// a .bsr recording at path and returns its size.
func writeMatchRecording(ctx context.Context, path string, game broadside.Config, entries []msg.Entry, final uint64) (int64, error) {
	return 0, errors.New("recordings are being integrated (replay/bsr)")
}
