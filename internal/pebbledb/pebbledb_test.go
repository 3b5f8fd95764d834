package pebbledb

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/goleak"
)

var errTestCorrupt = errors.New("corrupt")

func TestOpenAndCheckFormat(t *testing.T) {
	fs := vfs.NewMem()
	quiet := slog.New(slog.DiscardHandler)
	db, err := Open("db", Options{FS: fs, Logger: quiet, Component: "test"})
	if err != nil {
		t.Fatal(err)
	}
	key := []byte{0}
	if err := db.CheckFormat(key, "v1", errTestCorrupt); err != nil {
		t.Fatalf("new database: %v", err)
	}
	if err := db.CheckFormat(key, "v1", errTestCorrupt); err != nil {
		t.Fatalf("same format: %v", err)
	}
	if err := db.CheckFormat(key, "v2", errTestCorrupt); !errors.Is(err, errTestCorrupt) {
		t.Fatalf("other format: %v, want the caller's sentinel", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenOnTheOSFileSystem opens and closes a database with the
// disk-health-checked file system Open makes, then fails an Open: neither
// may leave the health checker's goroutine behind.
func TestOpenOnTheOSFileSystem(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := filepath.Join(t.TempDir(), "db")
	db, err := Open(dir, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("k"), []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(dir, "no", "such", "parent", "\x00"), Options{Logger: slog.New(slog.DiscardHandler)}); err == nil {
		t.Fatal("opened a database at an invalid path")
	}
}
