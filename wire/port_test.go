package wire

import (
	"math/rand/v2"
	"testing"
)

func TestUDSourcePort(t *testing.T) {
	// roce-wire-protocol.md §1.5 and the rxe-peer README (QP1 gives 55410).
	for _, tc := range []struct {
		qpn  uint32
		want uint16
	}{{1, 0xd872}, {1, 55410}, {0x11, 0xdf94}, {0x12, 0xf806}} {
		if got := UDSourcePort(tc.qpn); got != tc.want {
			t.Errorf("UDSourcePort(%#x) = %#x, want %#x", tc.qpn, got, tc.want)
		}
	}
	// hash_32(qpn, 14) in the kernel: (qpn * GOLDEN_RATIO_32) >> 18.
	rng := rand.New(rand.NewPCG(9, 10))
	for range 1000 {
		q := rng.Uint32() & mask24
		h := uint16(uint32(uint64(q)*0x61c88647) >> 18)
		if got := UDSourcePort(q); got != 0xc000+h || got < 0xc000 {
			t.Fatalf("UDSourcePort(%#x) = %#x", q, got)
		}
	}
}

func TestUDPSourcePort(t *testing.T) {
	if got := UDPSourcePort(0, 0x11, 0x12); got != 0xc132 {
		t.Errorf("rdma_get_udp_sport(0, 0x11, 0x12) = %#x, want 0xc132", got)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for range 1000 {
		a, b := rng.Uint32()&mask24, rng.Uint32()&mask24
		if UDPSourcePort(0, a, b) != UDPSourcePort(0, b, a) {
			t.Fatalf("not symmetric for %#x, %#x", a, b)
		}
		fl := rng.Uint32()&mask20 | 1
		got := UDPSourcePort(fl, a, b)
		want := uint16(0xc000 | (fl&0x3fff ^ fl>>14))
		if got != want {
			t.Fatalf("flow label %#x: %#x, want %#x", fl, got, want)
		}
	}
	// A non-zero flow label wins over the QPNs.
	if UDPSourcePort(0x12345, 1, 2) != UDPSourcePort(0x12345, 7, 9) {
		t.Error("flow label ignored")
	}
}
