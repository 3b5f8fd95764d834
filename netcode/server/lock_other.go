//go:build !unix

package server

// lockFile does not lock where flock is missing: one issuer at a time.
func lockFile(string) (func(), error) { return func() {}, nil }
