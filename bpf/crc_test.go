package bpf

import (
	"hash/crc32"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestCRCTableIsIEEE: the tables the fast path computes ICRCs with are
// hash/crc32's IEEE table, which wire's ICRC uses, and its slicing-by-8
// extension: table k, entry i is the CRC register after byte i and k zero
// bytes.
func TestCRCTableIsIEEE(t *testing.T) {
	src, err := os.ReadFile("crc32_table.h")
	if err != nil {
		t.Fatal(err)
	}
	words := regexp.MustCompile(`0x[0-9a-f]{8},`).FindAll(src, -1)
	if len(words) != 8*256 {
		t.Fatalf("%d entries, want 8×256", len(words))
	}
	var tab [8][256]uint32
	for i, w := range words {
		v, err := strconv.ParseUint(string(w[2:10]), 16, 32)
		if err != nil {
			t.Fatal(err)
		}
		tab[i/256][i%256] = uint32(v)
	}
	for i := range 256 {
		if tab[0][i] != crc32.IEEETable[i] {
			t.Errorf("table 0 entry %d is %#08x, want %#08x", i, tab[0][i], crc32.IEEETable[i])
		}
		for k := 1; k < 8; k++ {
			if v := tab[k-1][i]; tab[k][i] != v>>8^crc32.IEEETable[v&0xff] {
				t.Errorf("table %d entry %d is %#08x, want %#08x", k, i, tab[k][i], v>>8^crc32.IEEETable[v&0xff])
			}
		}
	}
}
