package broadside

import (
	"testing"

	"github.com/anoptic/broadside/lineage"
)

func TestEntityNames(t *testing.T) {
	for _, e := range []struct {
		id   uint64
		name string
	}{
		{uint64(ShipID(17)), "ship:17"},
		{uint64(ballID(43, 2*Guns*5+Guns+3)), "ball:43.91"},
		{uint64(ballID(4294967295, 1<<24-1)), "ball:4294967295.16777215"},
		{0x7, "0x7"},
	} {
		if got := EntityName(lineage.EntityID(e.id)); got != e.name {
			t.Errorf("EntityName(%#x) = %q, want %q", e.id, got, e.name)
		}
		back, err := ParseEntity(e.name)
		if err != nil || uint64(back) != e.id {
			t.Errorf("ParseEntity(%q) = %#x, %v; want %#x", e.name, uint64(back), err, e.id)
		}
	}
	for _, bad := range []string{"ship:0", "ship:x", "ball:1", "ball:0.3", "ball:1.99999999", "0", "boat:1"} {
		if _, err := ParseEntity(bad); err == nil {
			t.Errorf("ParseEntity(%q) accepted", bad)
		}
	}
}
