package loader

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDeviceMemory: the memory is whole pages of an mmapable array map,
// zeroed; what the process writes through the mapping is what the map (and
// so an XDP program) holds, and the reverse.
func TestDeviceMemory(t *testing.T) {
	if _, err := NewDeviceMemory(0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("0 bytes: %v, want EINVAL", err)
	}
	dm, err := NewDeviceMemory(5000)
	if errors.Is(err, ErrNoDeviceMemory) {
		t.Skipf("no device memory here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer dm.Close()
	b := dm.Bytes()
	if len(b) != 2*DMPage || !bytes.Equal(b, make([]byte, 2*DMPage)) {
		t.Fatalf("%d bytes, zeroed %v: want two zeroed pages", len(b), bytes.Equal(b, make([]byte, len(b))))
	}
	copy(b[DMPage+10:], "written through the mapping")
	page := make([]byte, DMPage)
	if err := dm.Map().Lookup(uint32(1), page); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(page[10:37], []byte("written through the mapping")) {
		t.Errorf("the map's page 1 holds %q", page[10:37])
	}
	copy(page, "written into the map")
	if err := dm.Map().Update(uint32(0), page, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[:20], []byte("written into the map")) {
		t.Errorf("the mapping's page 0 holds %q", b[:20])
	}
	if err := dm.Close(); err != nil {
		t.Fatal(err)
	}
}
