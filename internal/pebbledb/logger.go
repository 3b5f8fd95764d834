package pebbledb

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
)

// Logger returns a pebble.Logger writing to l (slog.Default() if nil).
// Routine messages (such as the WALs found on every Open) go to debug
// level; Fatalf logs and panics (Pebble's contract: it must not return),
// with a value DB.Apply recovers: Pebble calls it when a synced commit
// failed (ENOSPC, EIO), and the caller, told that nothing was stored,
// reopens the database instead of the process exiting. A Fatalf on one of
// Pebble's own goroutines still ends the process.
func Logger(l *slog.Logger) pebble.Logger {
	if l == nil {
		l = slog.Default()
	}
	return logger{l}
}

type logger struct{ l *slog.Logger }

func (p logger) Infof(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelDebug) {
		p.l.Debug(fmt.Sprintf(format, args...))
	}
}

func (p logger) Errorf(format string, args ...any) { p.l.Error(fmt.Sprintf(format, args...)) }

func (p logger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "fatal", true)
	panic(fatalError{msg})
}

// fatalError is the panic value of Logger's Fatalf.
type fatalError struct{ msg string }

func (e fatalError) Error() string { return e.msg }
