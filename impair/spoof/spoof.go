// Package spoof is an attacker on a RoCEv2 link, for testing how an RNIC
// (xdproce, rxe, hardware) stands up to forged frames. A Spoofer watches the
// RC traffic between a victim and its peer on an interface that sees both
// directions (a hub, a mirror port, the victim's own segment), learns their
// QPNs and PSNs, and sends frames that impersonate the peer: responses to the
// victim's requests, requests to its responder, and malformed frames, with
// PSNs chosen at random, at the edges of what is outstanding, and inside it.
//
// RoCEv2 has no authentication, so a frame that exactly matches what the
// victim expects next (a request at its expected PSN, a well-formed response
// for an outstanding request) cannot be told from the peer's, by any RNIC.
// By default the Spoofer avoids such exact hits, so that what it measures is
// whether everything else is dropped; Config.ExactHits sends them too.
// `xdproce spoof` runs one from the command line; docs/security.md says what
// each class tests and what to expect.
package spoof

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"

	"github.com/xdproce/xdproce/wire"
)

// Class is a family of forged frames.
type Class int

// The classes, in the order Forge cycles through them.
const (
	// Blind: responses and requests of every kind at random PSNs, as an
	// off-path attacker who knows the addresses and the QPN would send.
	Blind Class = iota
	// Edges: responses and requests at the PSNs just outside what is
	// outstanding, behind and ahead.
	Edges
	// InWindow: responses inside the victim's outstanding window that are
	// wrong in shape (READ responses of the wrong opcode sequence or length,
	// atomic ACKs where no atomic is outstanding) or harmless there
	// (sequence and RNR NAKs), and duplicate requests.
	InWindow
	// Malformed: frames truncated at every header, with a bad pad, bad
	// lengths, unknown opcodes, the wrong P_Key, or longer than the path MTU.
	Malformed
	// Exact: frames that match what the victim expects next (only with
	// Config.ExactHits): no RNIC can refuse them.
	Exact
	numClasses
)

var classNames = [numClasses]string{"blind", "edges", "in-window", "malformed", "exact"}

func (c Class) String() string {
	if c >= 0 && c < numClasses {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// ParseClasses reads a comma-separated list of class names ("all": every
// class but exact).
func ParseClasses(s string) ([]Class, error) {
	if s == "" || s == "all" {
		return []Class{Blind, Edges, InWindow, Malformed}, nil
	}
	var out []Class
	for _, f := range strings.Split(s, ",") {
		found := false
		for c, n := range classNames {
			if f == n {
				out, found = append(out, Class(c)), true
			}
		}
		if !found {
			return nil, fmt.Errorf("spoof: unknown class %q (blind, edges, in-window, malformed, exact, all)", f)
		}
	}
	return out, nil
}

// Endpoint is one side of the connection on the wire.
type Endpoint struct {
	MAC net.HardwareAddr
	IP  netip.Addr
}

// Config says whom to attack.
type Config struct {
	Victim, Peer Endpoint // frames go to Victim, impersonating Peer
	// VictimQPN is the victim's QP; 0: learn it from the peer's frames.
	VictimQPN uint32
	// PMTU of the connection (256..4096), for READ response lengths and
	// oversized frames. Default 1024.
	PMTU    int
	Classes []Class // default: all but Exact
	// ExactHits lets the Exact class through.
	ExactHits bool
	Seed      uint64
}

// Stats count what a Spoofer saw and sent.
type Stats struct {
	Seen       uint64 // frames of the connection observed
	Sent       [numClasses]uint64
	NotLearned uint64 // frames not forged for want of what the victim's QPN or PSNs are
}

// String is a one-line summary.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seen %d", s.Seen)
	for c, n := range s.Sent {
		fmt.Fprintf(&b, ", %s %d", Class(c), n)
	}
	fmt.Fprintf(&b, ", not learned %d", s.NotLearned)
	return b.String()
}

// view is what the frames of the connection say about both sides' PSNs.
type view struct {
	victimQPN, peerQPN uint32
	udpPort            uint16
	// victimReq: the last request PSN the victim sent, the end of its
	// requester's window; peerAck: the last PSN the peer acknowledged,
	// before the oldest the victim still waits for; peerReq: the last
	// request PSN the peer sent (the victim's responder expects the next);
	// atomics: request PSNs of the victim's recent atomics.
	victimReq, peerAck, peerReq         uint32
	haveVictimReq, havePeerAck, haveReq bool
	atomics                             map[uint32]bool
}

// Spoofer forges frames against one connection. It is not safe for
// concurrent use: one goroutine observes and forges (see Run).
type Spoofer struct {
	cfg   Config
	rng   *rand.Rand
	v     view
	stats Stats
	next  int                 // Forge's round-robin position in cfg.Classes
	kinds []wire.ResponseKind // what it forges towards the victim's requester; the atomic ACK last
}

// New makes a Spoofer.
func New(cfg Config) (*Spoofer, error) {
	if !cfg.Victim.IP.IsValid() || !cfg.Peer.IP.IsValid() || len(cfg.Victim.MAC) != 6 || len(cfg.Peer.MAC) != 6 {
		return nil, fmt.Errorf("spoof: victim and peer need a MAC and an IP address")
	}
	if cfg.Victim.IP.Is4() != cfg.Peer.IP.Is4() {
		return nil, fmt.Errorf("spoof: victim %v and peer %v are of different IP versions", cfg.Victim.IP, cfg.Peer.IP)
	}
	if cfg.PMTU == 0 {
		cfg.PMTU = 1024
	}
	if cfg.PMTU < 256 || cfg.PMTU > 4096 || cfg.PMTU&(cfg.PMTU-1) != 0 {
		return nil, fmt.Errorf("spoof: PMTU %d is not one of 256..4096", cfg.PMTU)
	}
	if len(cfg.Classes) == 0 {
		cfg.Classes, _ = ParseClasses("all")
	}
	for _, c := range cfg.Classes {
		if c == Exact && !cfg.ExactHits {
			return nil, fmt.Errorf("spoof: the exact class needs ExactHits")
		}
	}
	s := &Spoofer{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5ca1ab1e)), kinds: wire.ResponseKinds()}
	s.v.victimQPN = cfg.VictimQPN
	s.v.atomics = map[uint32]bool{}
	return s, nil
}

// Stats returns the counts so far.
func (s *Spoofer) Stats() Stats { return s.stats }

// Observe learns from one frame seen on the wire; frames of other flows are
// ignored.
func (s *Spoofer) Observe(frame []byte) {
	var p wire.Packet
	if wire.Decode(frame, &p) != nil {
		return
	}
	src, dst := p.IP.Src.Unmap(), p.IP.Dst.Unmap()
	v := &s.v
	info, _ := p.BTH.Opcode.Info()
	isResp := info.Flags&wire.FlagResponse != 0
	switch {
	case src == s.cfg.Peer.IP && dst == s.cfg.Victim.IP:
		if s.cfg.VictimQPN == 0 {
			v.victimQPN = p.BTH.DestQP
		}
		if p.BTH.DestQP != v.victimQPN {
			return
		}
		v.udpPort = p.UDP.SrcPort
		if isResp {
			if p.BTH.Opcode == wire.RCAck && p.AETH.IsACK() || !v.havePeerAck || psnAfter(p.BTH.PSN, v.peerAck) {
				v.peerAck, v.havePeerAck = p.BTH.PSN, true
			}
		} else if last := s.lastPSN(&p, info); !v.haveReq || psnAfter(last, v.peerReq) {
			v.peerReq, v.haveReq = last, true
		}
	case src == s.cfg.Victim.IP && dst == s.cfg.Peer.IP:
		if v.victimQPN == 0 {
			return
		}
		v.peerQPN = p.BTH.DestQP
		if !isResp {
			if last := s.lastPSN(&p, info); !v.haveVictimReq || psnAfter(last, v.victimReq) {
				v.victimReq, v.haveVictimReq = last, true
			}
			if info.Flags&wire.FlagAtomic != 0 {
				if len(v.atomics) > 4096 {
					clear(v.atomics)
				}
				v.atomics[p.BTH.PSN] = true
			}
		}
	default:
		return
	}
	s.stats.Seen++
}

// lastPSN is the last PSN a request occupies: a READ request takes one
// PSN per response packet.
func (s *Spoofer) lastPSN(p *wire.Packet, info wire.OpInfo) uint32 {
	if info.Flags&wire.FlagRead == 0 || p.RETH.Len == 0 {
		return p.BTH.PSN
	}
	n := (p.RETH.Len + uint32(s.cfg.PMTU) - 1) / uint32(s.cfg.PMTU)
	return (p.BTH.PSN + n - 1) & 0xffffff
}

// psnAfter reports whether PSN a comes after b (24-bit serial arithmetic).
func psnAfter(a, b uint32) bool { return (a-b)&0xffffff != 0 && (a-b)&0xffffff < 1<<23 }

// Forge returns the next forged frame, cycling through the classes, or nil
// while the victim's QPN or PSNs are not known yet (Blind needs only the QPN).
func (s *Spoofer) Forge() ([]byte, Class) {
	c := s.cfg.Classes[s.next%len(s.cfg.Classes)]
	s.next++
	if s.v.victimQPN == 0 || c != Blind && !(s.v.haveVictimReq || s.v.haveReq) {
		s.stats.NotLearned++
		return nil, c
	}
	var f []byte
	switch c {
	case Blind:
		f = s.blind()
	case Edges:
		f = s.edge()
	case InWindow:
		f = s.inWindow()
	case Malformed:
		f = s.malformed()
	case Exact:
		f = s.exact()
	}
	if f == nil {
		s.stats.NotLearned++
		return nil, c
	}
	s.stats.Sent[c]++
	return f, c
}
