package verbs

import (
	"testing"

	"github.com/xdproce/xdproce/link/memlink"
)

// Regions counts the device's live regions: registered ones, not those
// deregistered.
func TestRegionsCount(t *testing.T) {
	la, _ := memlink.NewPair(5000)
	d := newDevice(t, la, macA, ipA, 4096)
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if n := d.Regions(); n != 0 {
		t.Fatalf("%d regions on a new device", n)
	}
	var mrs []*MR
	for range 3 {
		mr, err := pd.AllocMR(4096, AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		mrs = append(mrs, mr)
	}
	if n := d.Regions(); n != 3 {
		t.Fatalf("%d regions after registering 3", n)
	}
	if err := mrs[1].Dereg(); err != nil {
		t.Fatal(err)
	}
	if n := d.Regions(); n != 2 {
		t.Fatalf("%d regions after deregistering 1 of 3", n)
	}
}
