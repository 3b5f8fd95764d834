package pebbledb

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/cockroachdb/pebble/v2"
)

// Logger returns a pebble.Logger writing to l (slog.Default() if nil).
// Routine messages (such as the WALs found on every Open) go to debug
// level; Fatalf logs and exits the process, as Pebble's contract requires
// (it calls it when it can no longer tell what is durable).
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
	p.l.Error(fmt.Sprintf(format, args...), "fatal", true)
	os.Exit(1)
}
