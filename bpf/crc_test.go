package bpf

import (
	"hash/crc32"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestCRCTableIsIEEE: the table the fast path computes ICRCs with is
// hash/crc32's IEEE table, which wire's ICRC uses.
func TestCRCTableIsIEEE(t *testing.T) {
	src, err := os.ReadFile("crc32_table.h")
	if err != nil {
		t.Fatal(err)
	}
	words := regexp.MustCompile(`0x[0-9a-f]{8},`).FindAll(src, -1)
	if len(words) != 256 {
		t.Fatalf("%d entries, want 256", len(words))
	}
	for i, w := range words {
		v, err := strconv.ParseUint(string(w[2:10]), 16, 32)
		if err != nil {
			t.Fatal(err)
		}
		if uint32(v) != crc32.IEEETable[i] {
			t.Errorf("entry %d is %#08x, want %#08x", i, v, crc32.IEEETable[i])
		}
	}
}
