package pebbledb

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Logger returns a pebble.Logger writing to l (slog.Default() if nil).
// Routine messages (such as the WALs found on every Open) go to debug
// level; Fatalf logs and panics (Pebble's contract: it must not return),
// with a value DB.Apply recovers: Pebble calls it when a synced commit
// failed (ENOSPC, EIO), and the caller, told that nothing was stored,
// reopens the database instead of the process exiting. A Fatalf on one of
// Pebble's own goroutines ends the process, except in the databases Open
// makes (see DB): there a failed MANIFEST write does not.
func Logger(l *slog.Logger) pebble.Logger {
	if l == nil {
		l = slog.Default()
	}
	return logger{l: l}
}

type logger struct {
	l *slog.Logger
	// givenUp, if set, is called for a failed MANIFEST write (a flush's
	// or a compaction's version edit on a full or failing disk) outside
	// DB.Apply; when it gave the instance up (true), Fatalf returns, as
	// Pebble's code after these calls allows, instead of panicking.
	givenUp func(msg string) bool
	// background, if set, rate-limits the "background error" messages.
	background *backgroundErrors
}

func (p logger) Infof(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelDebug) {
		p.l.Debug(fmt.Sprintf(format, args...))
	}
}

func (p logger) Errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if p.background != nil && strings.HasPrefix(msg, "background error") {
		if n, ok := p.background.allow(); !ok {
			return
		} else if n > 0 {
			p.l.Error(msg, "suppressed", n)
			return
		}
	}
	p.l.Error(msg)
}

// backgroundErrors bounds the "background error" messages of one
// instance to one a second: a flush failing on a full disk is retried
// without pause, each failure a message.
type backgroundErrors struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether to log a message now, and how many were
// suppressed since the last one logged.
func (b *backgroundErrors) allow() (suppressed int, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now := time.Now(); now.Sub(b.last) >= time.Second {
		n := b.suppressed
		b.last, b.suppressed = now, 0
		return n, true
	}
	b.suppressed++
	return 0, false
}

func (p logger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if p.givenUp != nil && strings.HasPrefix(msg, "MANIFEST ") && !inApply() && p.givenUp(msg) {
		p.l.Error(msg, "fatal", true, "then", "this instance of the database is given up until its owner reopens it")
		return
	}
	p.l.Error(msg, "fatal", true)
	panic(fatalError{msg})
}

// inApply reports whether DB.Apply is on the calling goroutine's stack:
// there a Fatalf's panic is recovered; anywhere else it ends the process.
func inApply() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "internal/pebbledb.(*DB).Apply") {
			return true
		}
		if !more {
			return false
		}
	}
}

// fatalError is the panic value of Logger's Fatalf.
type fatalError struct{ msg string }

func (e fatalError) Error() string { return e.msg }
