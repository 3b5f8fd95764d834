package server

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestRegistryAssignsDistinctIDs: names whose FNV-1a hashes collide
// ("costarring" and "liquid" do, in 32 bits) get distinct ids, and each
// keeps its id across openings and concurrent issuers.
func TestRegistryAssignsDistinctIDs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "players")
	r := OpenRegistry(path)
	a, err := r.ID("costarring")
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.ID("liquid")
	if err != nil {
		t.Fatal(err)
	}
	if a == b || a == 0 || b == 0 {
		t.Fatalf("ids %d and %d", a, b)
	}
	var wg sync.WaitGroup
	ids := make([]map[string]uint32, 8)
	for i := range ids {
		wg.Go(func() {
			m, err := OpenRegistry(path).IDs([]string{"liquid", "bot-1", "bot-2", "costarring"})
			if err != nil {
				t.Error(err)
			}
			ids[i] = m
		})
	}
	wg.Wait()
	for _, m := range ids {
		if m["costarring"] != a || m["liquid"] != b || m["bot-1"] != ids[0]["bot-1"] || m["bot-1"] == m["bot-2"] {
			t.Fatalf("ids changed: %v (first %v)", m, ids[0])
		}
	}
	b2, _ := os.ReadFile(path)
	byName, _, err := ParseRegistry(b2)
	if err != nil || len(byName) != 4 {
		t.Fatalf("registry %q: %v %v", b2, byName, err)
	}
	if _, err := r.ID("two words"); err == nil {
		t.Fatal("a name with a space accepted")
	}
}

func TestParseRegistryRejects(t *testing.T) {
	for _, s := range []string{"0 ada\n", "1 ada\n1 bob\n", "1 ada\n2 ada\n", "x ada\n", "1\n", "99999999999 ada\n", "1 \n"} {
		if _, _, err := ParseRegistry([]byte(s)); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

func FuzzParseRegistry(f *testing.F) {
	f.Add([]byte("1 ada\n2 bob\n"))
	f.Add([]byte("2147483647 max\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		byName, last, err := ParseRegistry(b)
		if err != nil {
			return
		}
		seen := map[uint32]bool{}
		for n, id := range byName {
			if id == 0 || id > last || seen[id] || !validName(n) {
				t.Fatalf("bad entry %q %d (last %d)", n, id, last)
			}
			seen[id] = true
		}
	})
}
