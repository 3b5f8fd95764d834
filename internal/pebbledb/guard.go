package pebbledb

import (
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrFenced is returned by every write of a database instance that was
// given up after a failed write (see DB.Reopen): its background work
// cannot touch the directory any more.
var ErrFenced = errors.New("pebbledb: database instance given up after a write failure")

// guard watches one database instance's file system: it remembers the
// first error of a write-path operation (a write, a sync, a create, a
// rename: ENOSPC, EIO, ...) and, once fenced, refuses every such
// operation, so that an instance abandoned while Pebble's commit pipeline
// is wedged cannot modify the directory under its successor.
type guard struct {
	fault  atomic.Pointer[error]
	fenced atomic.Bool

	mu    sync.Mutex
	locks []io.Closer
}

func (g *guard) check(err error) error {
	if g.fenced.Load() {
		return ErrFenced
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, os.ErrExist) {
		g.fault.CompareAndSwap(nil, &err)
	}
	return err
}

func (g *guard) before() error {
	if g.fenced.Load() {
		return ErrFenced
	}
	return nil
}

// Fault returns the first write-path error the instance's files saw.
func (g *guard) Fault() error {
	if p := g.fault.Load(); p != nil {
		return *p
	}
	return nil
}

// fence makes every later write-path operation fail and releases the
// directory lock the instance holds.
func (g *guard) fence() {
	g.fenced.Store(true)
	g.mu.Lock()
	locks := g.locks
	g.locks = nil
	g.mu.Unlock()
	for _, l := range locks {
		_ = l.Close()
	}
}

type guardFS struct {
	vfs.FS
	g *guard
}

func (fs guardFS) file(f vfs.File, err error) (vfs.File, error) {
	if err := fs.g.check(err); err != nil {
		if f != nil {
			_ = f.Close()
		}
		return nil, err
	}
	return guardFile{File: f, g: fs.g}, nil
}

// retryPause slows the creation of files by an instance whose writes
// failed: Pebble v2.1.7 retries a failed flush at once and for ever (a
// new table file each time, thousands a second on a full disk) until
// the instance is closed, which its owner does at its next write.
const retryPause = 50 * time.Millisecond

func (fs guardFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if fs.g.Fault() != nil || fs.g.fenced.Load() {
		time.Sleep(retryPause)
	}
	if err := fs.g.before(); err != nil {
		return nil, err
	}
	f, err := fs.file(fs.FS.Create(name, c))
	return markWAL(f, c), err
}

func (fs guardFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	if err := fs.g.before(); err != nil {
		return nil, err
	}
	return fs.file(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs guardFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.g.before(); err != nil {
		return nil, err
	}
	f, err := fs.file(fs.FS.ReuseForWrite(oldname, newname, c))
	return markWAL(f, c), err
}

func (fs guardFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	if err != nil {
		return nil, err
	}
	return guardFile{File: f, g: fs.g}, nil
}

func (fs guardFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return guardFile{File: f, g: fs.g}, nil
}

func (fs guardFS) Link(oldname, newname string) error {
	if err := fs.g.before(); err != nil {
		return err
	}
	return fs.g.check(fs.FS.Link(oldname, newname))
}

func (fs guardFS) Rename(oldname, newname string) error {
	if err := fs.g.before(); err != nil {
		return err
	}
	return fs.g.check(fs.FS.Rename(oldname, newname))
}

func (fs guardFS) Remove(name string) error {
	if err := fs.g.before(); err != nil {
		return err
	}
	return fs.FS.Remove(name)
}

func (fs guardFS) RemoveAll(name string) error {
	if err := fs.g.before(); err != nil {
		return err
	}
	return fs.FS.RemoveAll(name)
}

func (fs guardFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := fs.g.before(); err != nil {
		return err
	}
	return fs.g.check(fs.FS.MkdirAll(dir, perm))
}

func (fs guardFS) Lock(name string) (io.Closer, error) {
	if err := fs.g.before(); err != nil {
		return nil, err
	}
	l, err := fs.FS.Lock(name)
	if err != nil {
		return nil, err
	}
	fs.g.mu.Lock()
	defer fs.g.mu.Unlock()
	fs.g.locks = append(fs.g.locks, l)
	return guardLock{l: l, g: fs.g}, nil
}

type guardLock struct {
	l io.Closer
	g *guard
}

func (l guardLock) Close() error {
	l.g.mu.Lock()
	for i, x := range l.g.locks {
		if x == l.l {
			l.g.locks = append(l.g.locks[:i], l.g.locks[i+1:]...)
			l.g.mu.Unlock()
			return l.l.Close()
		}
	}
	l.g.mu.Unlock()
	return nil // released by fence
}

type guardFile struct {
	vfs.File
	g *guard
	// wal: the file is one of Pebble's write-ahead logs, whose
	// preallocations also extend its size (see extendWAL).
	wal bool
}

func (f guardFile) Write(p []byte) (int, error) {
	if err := f.g.before(); err != nil {
		return 0, err
	}
	n, err := f.File.Write(p)
	return n, f.g.check(err)
}

func (f guardFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.g.before(); err != nil {
		return 0, err
	}
	n, err := f.File.WriteAt(p, off)
	return n, f.g.check(err)
}

func (f guardFile) Preallocate(off, n int64) error {
	if err := f.g.before(); err != nil {
		return err
	}
	if err := f.g.check(f.File.Preallocate(off, n)); err != nil || !f.wal {
		return err
	}
	return f.g.check(extendWAL(f.File, off+n))
}

func (f guardFile) Sync() error {
	if err := f.g.before(); err != nil {
		return err
	}
	return f.g.check(f.File.Sync())
}

func (f guardFile) SyncData() error {
	if err := f.g.before(); err != nil {
		return err
	}
	return f.g.check(f.File.SyncData())
}

func (f guardFile) SyncTo(n int64) (bool, error) {
	if err := f.g.before(); err != nil {
		return false, err
	}
	full, err := f.File.SyncTo(n)
	return full, f.g.check(err)
}
