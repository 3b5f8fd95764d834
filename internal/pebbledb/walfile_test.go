package pebbledb

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestWALExtended: on the OS's file system a database's write-ahead log is
// as long as Pebble's preallocation from its first write (so a synced
// commit writes inside the file, see extendWAL), and a copy of the
// directory taken while the database is open, as a crash would leave it
// (zeros after the last synced record), opens with every synced key; so
// does the database itself after closing, and it takes new writes.
func TestWALExtended(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	dir := filepath.Join(t.TempDir(), "db")
	db, err := Open(dir, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := range n {
		if err := db.Set(fmt.Appendf(nil, "k%04d", i), []byte("v"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	var logs int
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		logs++
		// 200 records of a few dozen bytes, against a preallocation of
		// the memtable's size (4 MiB).
		if fi.Size() < 1<<20 {
			t.Errorf("WAL %s is %d bytes long: not extended to its preallocation", e.Name(), fi.Size())
		}
	}
	if logs == 0 {
		t.Fatalf("no WAL file in %s", dir)
	}
	image := filepath.Join(t.TempDir(), "image")
	copyDir(t, dir, image)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{image, dir} {
		db, err := Open(d, Options{Logger: quiet})
		if err != nil {
			t.Fatalf("open %s: %v", d, err)
		}
		for i := range n {
			k := fmt.Appendf(nil, "k%04d", i)
			_, closer, err := db.Get(k)
			if err != nil {
				t.Fatalf("%s: get %s: %v", d, k, err)
			}
			closer.Close()
		}
		if err := db.Set([]byte("after"), []byte("v"), pebble.Sync); err != nil {
			t.Fatalf("%s: write after reopening: %v", d, err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		src, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(to, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
		src.Close()
		if err := dst.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
