//go:build linux

package bpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/wire"
)

// XDP return codes (enum xdp_action).
const (
	xdpDrop     = 1
	xdpPass     = 2
	xdpRedirect = 4
)

var (
	localV4  = netip.MustParseAddr("198.18.0.1")
	localV6  = netip.MustParseAddr("fd00:198:18::1")
	remoteV4 = netip.MustParseAddr("198.18.0.2")
	remoteV6 = netip.MustParseAddr("fd00:198:18::2")
	otherV4  = netip.MustParseAddr("198.18.0.3")
	otherV6  = netip.MustParseAddr("fd00:198:18::3")
)

const (
	ethIPv4 = 0x0800
	ethIPv6 = 0x86dd
	ethARP  = 0x0806
	tpid1Q  = 0x8100
	tpid1AD = 0x88a8
	udpProt = 17
	tcpProt = 6
	roce    = 4791
)

// loadSteer loads the program with localV4 and localV6 as local addresses.
func loadSteer(t *testing.T) *SteerObjects {
	t.Helper()
	netns.RequireRoot(t)
	var objs SteerObjects
	if err := LoadSteerObjects(&objs, nil); err != nil {
		t.Fatalf("load: %+v", err)
	}
	t.Cleanup(func() { objs.Close() })
	for _, a := range []netip.Addr{localV4, localV6} {
		if err := objs.LocalAddrs.Put(a.As16(), uint8(1)); err != nil {
			t.Fatalf("put local address %s: %v", a, err)
		}
	}
	return &objs
}

func counters(t *testing.T, objs *SteerObjects) [SteerStatSTAT_MAX]uint64 {
	t.Helper()
	var out [SteerStatSTAT_MAX]uint64
	var perCPU []uint64
	for i := range out {
		if err := objs.Stats.Lookup(uint32(i), &perCPU); err != nil {
			t.Fatalf("read counter %d: %v", i, err)
		}
		for _, v := range perCPU {
			out[i] += v
		}
	}
	return out
}

// frame builds an Ethernet frame with the given VLAN tags (TPIDs).
func frame(tpids []uint16, ethType uint16, l3 []byte) []byte {
	b := make([]byte, 12, 14+4*len(tpids)+len(l3))
	copy(b, []byte{0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2})
	for i, tp := range tpids {
		b = binary.BigEndian.AppendUint16(b, tp)
		b = binary.BigEndian.AppendUint16(b, uint16(100+i)) // TCI
	}
	b = binary.BigEndian.AppendUint16(b, ethType)
	return append(b, l3...)
}

func udp(dport uint16, payload int) []byte {
	b := make([]byte, 8+payload)
	binary.BigEndian.PutUint16(b[0:], 0xc000)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+payload))
	for i := 8; i < len(b); i++ {
		b[i] = byte(i)
	}
	return b
}

func ipv4(proto uint8, src, dst netip.Addr, l4 []byte) []byte {
	b := make([]byte, 20, 20+len(l4))
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(20+len(l4)))
	binary.BigEndian.PutUint16(b[6:], 0x4000) // DF
	b[8] = 64
	b[9] = proto
	s, d := src.As4(), dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	return append(b, l4...)
}

func ipv6(next uint8, src, dst netip.Addr, l4 []byte) []byte {
	b := make([]byte, 40, 40+len(l4))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(l4)))
	b[6] = next
	b[7] = 64
	s, d := src.As16(), dst.As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	return append(b, l4...)
}

// roce4 is a well-formed RoCEv2 frame over IPv4 carrying payload bytes of
// BTH, extension headers, data and ICRC.
func roce4(dst netip.Addr, payload int) []byte {
	return frame(nil, ethIPv4, ipv4(udpProt, remoteV4, dst, udp(roce, payload)))
}

func roce6(dst netip.Addr, payload int) []byte {
	return frame(nil, ethIPv6, ipv6(udpProt, remoteV6, dst, udp(roce, payload)))
}

// with applies f to a copy of b.
func with(b []byte, f func(b []byte)) []byte {
	c := append([]byte(nil), b...)
	f(c)
	return c
}

func TestSteerVerdicts(t *testing.T) {
	objs := loadSteer(t)

	const (
		l3     = 14
		l4v4   = l3 + 20
		l4v6   = l3 + 40
		minPay = 12 + 4 // BTH + ICRC
	)
	ipv4Opts := func(dst netip.Addr) []byte {
		ip := ipv4(udpProt, remoteV4, dst, udp(roce, 40))
		// Insert 4 bytes of options (NOPs) and fix IHL and total length.
		withOpts := append(append(append([]byte(nil), ip[:20]...), 1, 1, 1, 1), ip[20:]...)
		withOpts[0] = 0x46
		binary.BigEndian.PutUint16(withOpts[2:], uint16(len(withOpts)))
		return frame(nil, ethIPv4, withOpts)
	}

	tests := []struct {
		name   string
		frame  []byte
		action uint32
		stats  []SteerStat // counters that must grow by one, all others stay
	}{
		{"arp", frame(nil, ethARP, make([]byte, 28)), xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"runt ethernet", make([]byte, 14), xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"roce v4 local, no socket", roce4(localV4, 64), xdpDrop, []SteerStat{SteerStatSTAT_NO_SOCKET}},
		{"roce v4 local, minimal", roce4(localV4, minPay), xdpDrop, []SteerStat{SteerStatSTAT_NO_SOCKET}},
		{"roce v4 local, ethernet padding", append(roce4(localV4, minPay), make([]byte, 8)...), xdpDrop, []SteerStat{SteerStatSTAT_NO_SOCKET}},
		{"roce v4 local, 802.1Q", frame([]uint16{tpid1Q}, ethIPv4, ipv4(udpProt, remoteV4, localV4, udp(roce, 64))), xdpDrop, []SteerStat{SteerStatSTAT_NO_SOCKET}},
		{"802.1ad+802.1Q passes", frame([]uint16{tpid1AD, tpid1Q}, ethIPv4, ipv4(udpProt, remoteV4, localV4, udp(roce, 64))), xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"802.1ad alone passes", frame([]uint16{tpid1AD}, ethIPv4, ipv4(udpProt, remoteV4, localV4, udp(roce, 64))), xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"802.1Q+802.1Q passes", frame([]uint16{tpid1Q, tpid1Q}, ethIPv4, ipv4(udpProt, remoteV4, localV4, udp(roce, 64))), xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"three vlan tags pass", frame([]uint16{tpid1AD, tpid1Q, tpid1Q}, ethIPv4, ipv4(udpProt, remoteV4, localV4, udp(roce, 64))), xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"roce v4 with ip options", ipv4Opts(localV4), xdpDrop, []SteerStat{SteerStatSTAT_NO_SOCKET}},
		{"roce v4 4096 path mtu frame", roce4(localV4, 12+4096+4), xdpDrop, []SteerStat{SteerStatSTAT_NO_SOCKET}},
		{"roce v4 jumbo frame (multi-buffer)", roce4(localV4, 8900), xdpDrop, []SteerStat{SteerStatSTAT_NO_SOCKET}},
		{"roce v4 other address", roce4(otherV4, 64), xdpPass, []SteerStat{SteerStatSTAT_PASSED, SteerStatSTAT_NOT_LOCAL}},
		{"roce v4 source is local, destination not", frame(nil, ethIPv4, ipv4(udpProt, localV4, otherV4, udp(roce, 64))), xdpPass, []SteerStat{SteerStatSTAT_PASSED, SteerStatSTAT_NOT_LOCAL}},
		{"udp v4 other port", frame(nil, ethIPv4, ipv4(udpProt, remoteV4, localV4, udp(4792, 64))), xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"tcp v4 port 4791", frame(nil, ethIPv4, ipv4(tcpProt, remoteV4, localV4, udp(roce, 64))), xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"icmp v4", frame(nil, ethIPv4, ipv4(1, remoteV4, localV4, make([]byte, 16))), xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"v4 first fragment", with(roce4(localV4, 64), func(b []byte) { binary.BigEndian.PutUint16(b[l3+6:], 0x2000) }), xdpPass, []SteerStat{SteerStatSTAT_PASSED, SteerStatSTAT_FRAGMENT}},
		{"v4 later fragment", with(roce4(localV4, 64), func(b []byte) { binary.BigEndian.PutUint16(b[l3+6:], 0x0010) }), xdpPass, []SteerStat{SteerStatSTAT_PASSED, SteerStatSTAT_FRAGMENT}},
		{"v4 ihl 4 passes", with(roce4(localV4, 64), func(b []byte) { b[l3] = 0x44 }), xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"version 6 in ipv4 ethertype passes", with(roce4(localV4, 64), func(b []byte) { b[l3] = 0x65 }), xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"v4 truncated ip header", roce4(localV4, 64)[:l3+19], xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"v4 truncated udp header", roce4(localV4, 64)[:l4v4+7], xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"roce v4 frame shorter than ip length", roce4(localV4, 64)[:l4v4+40], xdpDrop, []SteerStat{SteerStatSTAT_MALFORMED}},
		{"roce v4 ip length shorter than header", with(roce4(localV4, 64), func(b []byte) { binary.BigEndian.PutUint16(b[l3+2:], 16) }), xdpDrop, []SteerStat{SteerStatSTAT_MALFORMED}},
		{"roce v4 udp length beyond ip payload", with(roce4(localV4, 64), func(b []byte) { binary.BigEndian.PutUint16(b[l4v4+4:], 8+65) }), xdpDrop, []SteerStat{SteerStatSTAT_MALFORMED}},
		{"roce v4 udp length below bth+icrc", with(roce4(localV4, 64), func(b []byte) { binary.BigEndian.PutUint16(b[l4v4+4:], 8+minPay-1) }), xdpDrop, []SteerStat{SteerStatSTAT_MALFORMED}},
		{"roce v4 udp length 0", with(roce4(localV4, 64), func(b []byte) { binary.BigEndian.PutUint16(b[l4v4+4:], 0) }), xdpDrop, []SteerStat{SteerStatSTAT_MALFORMED}},
		{"roce v4 payload below bth+icrc", roce4(localV4, minPay-1), xdpDrop, []SteerStat{SteerStatSTAT_MALFORMED}},
		{"roce v4 udp length shorter than ip payload", with(roce4(localV4, 64), func(b []byte) { binary.BigEndian.PutUint16(b[l4v4+4:], 8+32) }), xdpDrop, []SteerStat{SteerStatSTAT_NO_SOCKET}},
		{"roce v4 multi-buffer truncated", with(roce4(localV4, 8900), func(b []byte) { binary.BigEndian.PutUint16(b[l3+2:], 20+8+8900+1) }), xdpDrop, []SteerStat{SteerStatSTAT_MALFORMED}},
		{"non-local v4 malformed passes", with(roce4(otherV4, 64), func(b []byte) { binary.BigEndian.PutUint16(b[l4v4+4:], 0) }), xdpPass, []SteerStat{SteerStatSTAT_PASSED, SteerStatSTAT_NOT_LOCAL}},

		{"roce v6 local, no socket", roce6(localV6, 64), xdpDrop, []SteerStat{SteerStatSTAT_NO_SOCKET}},
		{"roce v6 local, 802.1Q", frame([]uint16{tpid1Q}, ethIPv6, ipv6(udpProt, remoteV6, localV6, udp(roce, 64))), xdpDrop, []SteerStat{SteerStatSTAT_NO_SOCKET}},
		{"roce v6 jumbo frame (multi-buffer)", roce6(localV6, 8900), xdpDrop, []SteerStat{SteerStatSTAT_NO_SOCKET}},
		{"roce v6 other address", roce6(otherV6, 64), xdpPass, []SteerStat{SteerStatSTAT_PASSED, SteerStatSTAT_NOT_LOCAL}},
		{"roce v6 to ipv4-mapped local", roce6(netip.AddrFrom16(localV4.As16()), 64), xdpDrop, []SteerStat{SteerStatSTAT_NO_SOCKET}},
		{"udp v6 other port", frame(nil, ethIPv6, ipv6(udpProt, remoteV6, localV6, udp(53, 64))), xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"v6 hop-by-hop header passes", frame(nil, ethIPv6, ipv6(0, remoteV6, localV6, udp(roce, 64))), xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"v6 fragment", frame(nil, ethIPv6, ipv6(44, remoteV6, localV6, udp(roce, 64))), xdpPass, []SteerStat{SteerStatSTAT_PASSED, SteerStatSTAT_FRAGMENT}},
		{"v6 wrong version passes", with(roce6(localV6, 64), func(b []byte) { b[l3] = 0x40 }), xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"v6 truncated udp header", roce6(localV6, 64)[:l4v6+4], xdpPass, []SteerStat{SteerStatSTAT_PASSED}},
		{"roce v6 frame shorter than payload length", roce6(localV6, 64)[:l4v6+30], xdpDrop, []SteerStat{SteerStatSTAT_MALFORMED}},
		{"roce v6 jumbogram payload length 0", with(roce6(localV6, 64), func(b []byte) { binary.BigEndian.PutUint16(b[l3+4:], 0) }), xdpDrop, []SteerStat{SteerStatSTAT_MALFORMED}},
		{"roce v6 udp length beyond payload", with(roce6(localV6, 64), func(b []byte) { binary.BigEndian.PutUint16(b[l4v6+4:], 8+65) }), xdpDrop, []SteerStat{SteerStatSTAT_MALFORMED}},
		{"roce v6 udp length below bth+icrc", with(roce6(localV6, 64), func(b []byte) { binary.BigEndian.PutUint16(b[l4v6+4:], 8+minPay-1) }), xdpDrop, []SteerStat{SteerStatSTAT_MALFORMED}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := counters(t, objs)
			ret, err := objs.XdpRoceSteer.Run(&ebpf.RunOptions{Data: tc.frame})
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if ret != tc.action {
				t.Errorf("action = %d, want %d", ret, tc.action)
			}
			after := counters(t, objs)
			want := before
			for _, s := range tc.stats {
				want[s]++
			}
			if after != want {
				t.Errorf("counters = %v, want %v (before %v)", after, want, before)
			}
		})
	}
}

// TestSteerAgreesWithCodec: the XDP program steers to AF_XDP exactly the
// frames to a local address that the codec takes for RoCEv2 (whatever it
// then thinks of their transport headers); a frame the codec would refuse
// as not RoCE must go to the kernel instead of being dropped unseen.
func TestSteerAgreesWithCodec(t *testing.T) {
	objs := loadSteer(t)
	v4 := ipv4(udpProt, remoteV4, localV4, udp(roce, 64))
	v6 := ipv6(udpProt, remoteV6, localV6, udp(roce, 64))
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"v4 untagged", frame(nil, ethIPv4, v4)},
		{"v6 untagged", frame(nil, ethIPv6, v6)},
		{"v4 802.1Q", frame([]uint16{tpid1Q}, ethIPv4, v4)},
		{"v6 802.1Q", frame([]uint16{tpid1Q}, ethIPv6, v6)},
		{"v4 802.1ad", frame([]uint16{tpid1AD}, ethIPv4, v4)},
		{"v6 802.1ad", frame([]uint16{tpid1AD}, ethIPv6, v6)},
		{"v4 802.1ad+802.1Q", frame([]uint16{tpid1AD, tpid1Q}, ethIPv4, v4)},
		{"v6 802.1ad+802.1Q", frame([]uint16{tpid1AD, tpid1Q}, ethIPv6, v6)},
		{"v4 802.1Q+802.1Q", frame([]uint16{tpid1Q, tpid1Q}, ethIPv4, v4)},
		{"v4 other port", frame(nil, ethIPv4, ipv4(udpProt, remoteV4, localV4, udp(4792, 64)))},
		{"v4 tcp", frame(nil, ethIPv4, ipv4(tcpProt, remoteV4, localV4, udp(roce, 64)))},
		{"arp", frame(nil, ethARP, make([]byte, 28))},
	} {
		sealIPv4(tc.frame)
		ret, err := objs.XdpRoceSteer.Run(&ebpf.RunOptions{Data: tc.frame})
		if err != nil {
			t.Fatalf("%s: run: %v", tc.name, err)
		}
		steered := ret != xdpPass // no socket is bound here: steered frames are dropped
		var p wire.Packet
		roce := !errors.Is(wire.Decode(tc.frame, &p), wire.ErrNotRoCE)
		if steered != roce {
			t.Errorf("%s: XDP steers it: %v, the codec takes it for RoCEv2: %v", tc.name, steered, roce)
		}
	}
}

// sealIPv4 fills in the IPv4 header checksum of a frame with any number of
// VLAN tags, so that the codec judges the rest of it.
func sealIPv4(f []byte) {
	off := 12
	for binary.BigEndian.Uint16(f[off:]) == tpid1Q || binary.BigEndian.Uint16(f[off:]) == tpid1AD {
		off += 4
	}
	if binary.BigEndian.Uint16(f[off:]) != ethIPv4 {
		return
	}
	h := f[off+2 : off+2+20]
	h[10], h[11] = 0, 0
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
}

// Mangled frames: every run ends in exactly one of pass, malformed or
// no_socket, and the verdict matches the counter that moved.
func TestSteerMangledFrames(t *testing.T) {
	objs := loadSteer(t)
	rng := rand.New(rand.NewPCG(1, 2))
	seeds := [][]byte{
		roce4(localV4, 64), roce6(localV6, 64), roce4(otherV4, 64),
		frame([]uint16{tpid1Q}, ethIPv4, ipv4(udpProt, remoteV4, localV4, udp(roce, 64))),
		frame([]uint16{tpid1AD, tpid1Q}, ethIPv6, ipv6(udpProt, remoteV6, localV6, udp(roce, 64))),
	}
	const runs = 3000
	for i := range runs {
		f := append([]byte(nil), seeds[rng.IntN(len(seeds))]...)
		for range 1 + rng.IntN(4) {
			// Flip bytes in the headers, where the parser looks.
			f[rng.IntN(min(len(f), 80))] = byte(rng.UintN(256))
		}
		if rng.IntN(3) == 0 {
			f = f[:14+rng.IntN(len(f)-14)]
		}
		before := counters(t, objs)
		ret, err := objs.XdpRoceSteer.Run(&ebpf.RunOptions{Data: f})
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		after := counters(t, objs)
		var moved SteerStat = SteerStatSTAT_MAX
		n := 0
		for _, s := range []SteerStat{SteerStatSTAT_PASSED, SteerStatSTAT_REDIRECTED, SteerStatSTAT_MALFORMED, SteerStatSTAT_NO_SOCKET} {
			d := after[s] - before[s]
			if d > 0 {
				moved = s
				n += int(d)
			}
		}
		if n != 1 {
			t.Fatalf("frame %x: %d final counters moved, want 1", f, n)
		}
		switch {
		case moved == SteerStatSTAT_PASSED && ret == xdpPass:
		case (moved == SteerStatSTAT_MALFORMED || moved == SteerStatSTAT_NO_SOCKET) && ret == xdpDrop:
		default:
			t.Fatalf("frame %x: action %d but counter %d moved", f, ret, moved)
		}
	}
}

// The object must not depend on where it was generated.
func TestObjectHasNoAbsolutePaths(t *testing.T) {
	for _, p := range []string{"/work/", "/tmp/", "/home/", "/root/"} {
		if idx := bytes.Index(_SteerBytes, []byte(p)); idx >= 0 {
			t.Errorf("steer_bpfel.o contains %q at %d", p, idx)
		}
	}
}

func TestSpec(t *testing.T) {
	spec, err := LoadSteer()
	if err != nil {
		t.Fatal(err)
	}
	prog := spec.Programs[SteerProgXdpRoceSteer]
	if prog == nil {
		t.Fatal("program missing")
	}
	if prog.Type != ebpf.XDP || prog.SectionName != "xdp.frags" {
		t.Errorf("program type %v section %q, want XDP in xdp.frags", prog.Type, prog.SectionName)
	}
	if got := spec.Maps[SteerMapStats].MaxEntries; got != uint32(SteerStatSTAT_MAX) {
		t.Errorf("stats map has %d entries, want %d", got, SteerStatSTAT_MAX)
	}
	if ks := spec.Maps[SteerMapLocalAddrs].KeySize; ks != 16 {
		t.Errorf("local_addrs key size %d, want 16", ks)
	}
	if spec.Maps[SteerMapXsks].Type != ebpf.XSKMap {
		t.Errorf("xsks map type %v", spec.Maps[SteerMapXsks].Type)
	}
}
