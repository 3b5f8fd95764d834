// Package gamebench holds the system benchmarks of the engine running the
// sample game (demo/broadside): `broadside bench sim` (simulation shards:
// tick rate, snapshots, recovery, replay), `broadside bench seek` (seeking
// in .bsr recordings against the Unreal and CS2 models) and `broadside
// bench lineage` (lineage recording overhead, size and Why latency). The
// command log's benchmark is its neighbour, internal/logbench.
//
// Each benchmark is one Run function taking a config struct (what the
// CLI's flags set) and the writer of its table; cmd/broadside only wires
// flags to them.
package gamebench
