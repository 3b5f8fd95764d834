// Package fb is the Go code flatc generates from the schemas in
// netcode/wire (namespace fb). Every other file of this package is generated
// by `go generate ./netcode/wire`; do not edit them.
//
// The accessors here trust their input: call a netcode/wire Verify function
// on a buffer before reading it with them.
package fb
