package bsr

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestLineageOf(t *testing.T) {
	l := makeTestLog(t, 2, 120, 17)
	path, _ := recordTestLog(t, l, RecordConfig{})
	ix, err := LineageOf(path)
	if err != nil {
		t.Fatal(err)
	}
	r := mustOpen(t, path)
	want, err := r.Lineage()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ix.Stats(), want.Stats()) || ix.Stats().LastTick != 120 {
		t.Fatalf("%+v, want %+v", ix.Stats(), want.Stats())
	}
	if _, err := LineageOf(filepath.Join(t.TempDir(), "none.bsr")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
}
