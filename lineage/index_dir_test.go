//go:build !js

package lineage

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func TestIndexDir(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "lin")
	if _, err := IndexDir(ctx, dir, PebbleOptions{}); err == nil || !strings.Contains(err.Error(), "lineage store "+dir) {
		t.Fatalf("a missing directory: %v", err)
	}
	s, err := OpenPebble(dir, PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := IndexDir(ctx, dir, PebbleOptions{}); err == nil || !strings.Contains(err.Error(), "holds no lineage") {
		t.Fatalf("an empty store: %v", err)
	}
	if s, err = OpenPebble(dir, PebbleOptions{}); err != nil {
		t.Fatal(err)
	}
	putTestRange(t, s, testRange(0, 0, 128, 1))
	putTestRange(t, s, testRange(1, 0, 64, 1))
	s.Close()
	ix, err := IndexDir(ctx, dir, PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := ix.Stats()
	if st.Ranges != 2 || st.Shards != 2 {
		t.Fatalf("%+v", st)
	}
	var b bytes.Buffer
	st.WriteText(&b)
	if !strings.HasPrefix(b.String(), "lineage of ticks 0..127 in 2 shards: 2 ranges, ") || !strings.Contains(b.String(), " input records\n") {
		t.Fatalf("%s", b.String())
	}
}
