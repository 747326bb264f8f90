package spoof

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/xdproce/xdproce/wire"
)

var (
	victim = Endpoint{MAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, IP: netip.MustParseAddr("198.18.0.2")}
	peer   = Endpoint{MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, IP: netip.MustParseAddr("198.18.0.1")}
)

// seen builds a frame of the connection for Observe.
func seen(t *testing.T, from, to Endpoint, qpn uint32, op wire.Opcode, psn uint32, readLen uint32) []byte {
	t.Helper()
	var p wire.Packet
	p.Eth = wire.Ethernet{Dst: [6]byte(to.MAC), Src: [6]byte(from.MAC)}
	p.IP = wire.IP{Src: from.IP, Dst: to.IP, TTL: 64, DF: true}
	p.UDP = wire.UDP{SrcPort: 0xc123, DstPort: wire.UDPPort}
	p.BTH = wire.BTH{Opcode: op, PKey: 0xffff, DestQP: qpn, PSN: psn}
	p.AETH = wire.AETH{Syndrome: wire.ACKSyndrome(31)}
	p.RETH = wire.RETH{Len: readLen, RKey: 1}
	buf := make([]byte, 512)
	n, err := wire.Encode(buf, &p)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:max(n, wire.MinFrameLen)]
}

// TestForgeFromObservedTraffic: after seeing the peer's requests and the
// victim's, every class but exact forges; well-formed classes decode as
// RoCEv2 to the victim's QP, from the peer; no request lands at the PSN the
// victim's responder expects and no response lands on an outstanding PSN
// the frames seen do not cover.
func TestForgeFromObservedTraffic(t *testing.T) {
	s, err := New(Config{Victim: victim, Peer: peer, PMTU: 1024, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := s.Forge(); f != nil {
		t.Fatal("forged before knowing the victim's QPN")
	}
	s.Observe(seen(t, peer, victim, 0x123, wire.RCReadRequest, 1000, 4096)) // occupies 1000..1003
	s.Observe(seen(t, victim, peer, 0x456, wire.RCSendOnly, 500, 0))
	s.Observe(seen(t, peer, victim, 0x123, wire.RCAck, 499, 0))
	if st := s.Stats(); st.Seen != 3 {
		t.Fatalf("seen %d frames of 3", st.Seen)
	}
	for range 4000 {
		f, c := s.Forge()
		if f == nil {
			continue
		}
		var p wire.Packet
		err := wire.Decode(f, &p)
		if c == Malformed {
			if err == nil && p.BTH.PKey == 0xffff && len(p.Payload) <= 1024 {
				t.Fatalf("a malformed frame decodes cleanly: %+v", p.BTH)
			}
			continue
		}
		if err != nil && !errors.Is(err, wire.ErrBadLength) {
			t.Fatalf("%v frame: %v", c, err)
		}
		if p.BTH.DestQP != 0x123 || p.IP.Src != peer.IP || p.IP.Dst != victim.IP {
			t.Fatalf("%v frame to QP %#x from %v to %v", c, p.BTH.DestQP, p.IP.Src, p.IP.Dst)
		}
		info, _ := p.BTH.Opcode.Info()
		if info.Flags&wire.FlagRequest != 0 && p.BTH.PSN == 1004 {
			t.Fatalf("%v: a request at the expected PSN", c)
		}
		if info.Flags&wire.FlagResponse != 0 && p.BTH.PSN == 501 {
			t.Fatalf("%v: a response for a PSN not seen sent", c)
		}
	}
	st := s.Stats()
	for _, c := range []Class{Blind, Edges, InWindow, Malformed} {
		if st.Sent[c] == 0 {
			t.Errorf("no %v frame: %v", c, st)
		}
	}
}

func TestParseClasses(t *testing.T) {
	if cs, err := ParseClasses("all"); err != nil || len(cs) != 4 {
		t.Fatalf("all: %v %v", cs, err)
	}
	if cs, err := ParseClasses("blind,exact"); err != nil || len(cs) != 2 || cs[1] != Exact {
		t.Fatalf("blind,exact: %v %v", cs, err)
	}
	if _, err := ParseClasses("nope"); err == nil {
		t.Fatal("an unknown class parsed")
	}
	if _, err := New(Config{Victim: victim, Peer: peer, Classes: []Class{Exact}}); err == nil {
		t.Fatal("exact without ExactHits accepted")
	}
}
