// Package pebbletest holds what the tests of the Pebble-backed stores
// share: a disk that fails on demand.
package pebbletest

import "github.com/cockroachdb/pebble/v2/vfs/errorfs"

// FailingDisk returns an injector, off until its On is called, that fails
// every write-path operation with err (ENOSPC or EIO, as a full or failing
// disk does). Removing files, locks and closes still succeed, so a store
// can be closed and its space freed while the fault is on. Wrap a file
// system with errorfs.Wrap(fs, FailingDisk(err)).
func FailingDisk(err error) *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && op.Kind != errorfs.OpRemove && op.Kind != errorfs.OpRemoveAll &&
			op.Kind != errorfs.OpLock && op.Kind != errorfs.OpFileClose {
			return err
		}
		return nil
	})}
}
