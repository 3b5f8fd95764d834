package server

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Registry assigns player ids: the first time a name is asked for it gets
// the next free id, and it keeps it. Ids are never derived from names, so
// two names never share an id. The registry is a text file, one "id name"
// line per player, shared by every issuer of tokens on a machine
// ('broadside token', 'broadside bots'); a lock file serialises them.
type Registry struct {
	path string
}

// MaxRegistryPlayers bounds a registry: a registry file is read whole.
const MaxRegistryPlayers = 1 << 20

// EphemeralIDBase: a Registry assigns ids below it; tools that number
// their own players without one (bots, benches) use ids from it up.
const EphemeralIDBase = 1 << 31

// OpenRegistry returns the registry kept in path (created on first use).
func OpenRegistry(path string) *Registry { return &Registry{path: path} }

// ID returns name's id, assigning one if the name is new.
func (r *Registry) ID(name string) (uint32, error) {
	ids, err := r.IDs([]string{name})
	if err != nil {
		return 0, err
	}
	return ids[name], nil
}

// IDs returns the ids of names, assigning ids to the new ones in order.
func (r *Registry) IDs(names []string) (map[string]uint32, error) {
	for _, n := range names {
		if !validName(n) {
			return nil, fmt.Errorf("server: registry: player name %q must be 1..%d bytes of UTF-8 without spaces or control characters", n, MaxPlayerName)
		}
	}
	if err := os.MkdirAll(filepath.Dir(r.path), 0o755); err != nil {
		return nil, fmt.Errorf("server: registry %s: %w", r.path, err)
	}
	unlock, err := lockFile(r.path + ".lock")
	if err != nil {
		return nil, fmt.Errorf("server: registry %s: lock: %w", r.path, err)
	}
	defer unlock()
	b, err := os.ReadFile(r.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("server: registry %s: %w", r.path, err)
	}
	byName, last, err := ParseRegistry(b)
	if err != nil {
		return nil, fmt.Errorf("server: registry %s: %w", r.path, err)
	}
	out := make(map[string]uint32, len(names))
	var added []byte
	for _, n := range names {
		id, ok := byName[n]
		if !ok {
			if last >= EphemeralIDBase-1 || len(byName) >= MaxRegistryPlayers {
				return nil, fmt.Errorf("server: registry %s: full", r.path)
			}
			last++
			id = last
			byName[n] = id
			added = fmt.Appendf(added, "%d %s\n", id, n)
		}
		out[n] = id
	}
	if len(added) > 0 {
		f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("server: registry %s: %w", r.path, err)
		}
		_, werr := f.Write(added)
		serr := f.Sync()
		if err := errors.Join(werr, serr, f.Close()); err != nil {
			return nil, fmt.Errorf("server: registry %s: write: %w", r.path, err)
		}
	}
	return out, nil
}

func validName(n string) bool {
	if n == "" || len(n) > MaxPlayerName || !utf8.ValidString(n) {
		return false
	}
	for _, c := range n {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// ParseRegistry decodes a registry file: the id of each name, and the
// highest id given. It rejects malformed lines, ids 0 and from
// EphemeralIDBase, and a name or an id given twice.
func ParseRegistry(b []byte) (byName map[string]uint32, last uint32, err error) {
	byName = map[string]uint32{}
	seen := map[uint32]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 128), 128)
	for line := 1; sc.Scan(); line++ {
		idStr, name, ok := strings.Cut(sc.Text(), " ")
		if !ok || !validName(name) {
			return nil, 0, fmt.Errorf("line %d: want \"id name\"", line)
		}
		id, err := strconv.ParseUint(idStr, 10, 32)
		if err != nil || id == 0 || id >= EphemeralIDBase {
			return nil, 0, fmt.Errorf("line %d: bad id %q", line, idStr)
		}
		if _, dup := byName[name]; dup || seen[uint32(id)] {
			return nil, 0, fmt.Errorf("line %d: name %q or id %d given twice", line, name, id)
		}
		if len(byName) >= MaxRegistryPlayers {
			return nil, 0, fmt.Errorf("more than %d players", MaxRegistryPlayers)
		}
		byName[name], seen[uint32(id)] = uint32(id), true
		last = max(last, uint32(id))
	}
	if err := sc.Err(); err != nil {
		return nil, 0, err
	}
	return byName, last, nil
}
