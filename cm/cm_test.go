package cm

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/xdproce/xdproce/internal/pcap"
	"github.com/xdproce/xdproce/wire"
)

// mads returns the CM MADs of a capture of real rdma_cm traffic (UD SEND
// ONLY to QP1), with their packets.
func mads(t *testing.T, name string) ([][]byte, []wire.Packet) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "wire", "testdata", "pcaps", name+".pcap"))
	if err != nil {
		t.Fatal(err)
	}
	_, recs, err := pcap.ReadAll(data)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	var pkts []wire.Packet
	for _, r := range recs {
		var p wire.Packet
		if wire.Decode(r.Data, &p) != nil || p.BTH.DestQP != QP1 {
			continue
		}
		out = append(out, append(append([]byte(nil), p.Payload...), p.PayloadTail...))
		pkts = append(pkts, p)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no CM MADs", name)
	}
	return out, pkts
}

// TestCapturesRoundTrip: every CM MAD of rxe's rping and rdma_cm captures
// decodes, re-encodes byte for byte, and says what rdma_cm sent: a REQ to
// rping's service ID with the IP header of the packet's addresses, then
// REP, RTU, DREQ and DREP under the same communication IDs.
func TestCapturesRoundTrip(t *testing.T) {
	for _, name := range []string{"rping", "rdma_cm_send"} {
		t.Run(name, func(t *testing.T) {
			ms, pkts := mads(t, name)
			var seq []Attr
			var req *REQ
			var rep *REP
			for i, mad := range ms {
				p := &pkts[i]
				if p.BTH.Opcode != wire.UDSendOnly || p.DETH.QKey != GSIQKey || p.DETH.SrcQP != QP1 || len(mad) != MADLen {
					t.Fatalf("MAD %d: %v Q_Key %#x from QP %d, %d bytes", i, p.BTH.Opcode, p.DETH.QKey, p.DETH.SrcQP, len(mad))
				}
				h, m, err := Decode(mad)
				if err != nil {
					t.Fatalf("MAD %d: %v", i, err)
				}
				again, err := Encode(h, m)
				if err != nil || !bytes.Equal(again, mad) {
					t.Fatalf("MAD %d (%v) re-encodes differently (%v):\n%x\n%x", i, h.Attr, err, again, mad)
				}
				seq = append(seq, h.Attr)
				switch m := m.(type) {
				case *REQ:
					req = m
					ip, err := GetIPHeader(m.PrivateData[:])
					if err != nil || ip.Src != p.IP.Src || ip.Dst != p.IP.Dst {
						t.Errorf("REQ's IP header %+v (%v), packet %v -> %v", ip, err, p.IP.Src, p.IP.Dst)
					}
					// rping listens on 7174, rdma_cm_send (perftest -R) on 18515.
					if ps, port := SplitServiceID(m.ServiceID); ps != PortSpaceTCP || (port != 7174 && port != 18515) ||
						m.ServiceID != ServiceID(PortSpaceTCP, port) {
						t.Errorf("REQ's service ID %#x", m.ServiceID)
					}
					// As Linux's rdma_cm sends it on RoCE: permissive LIDs, the default
					// P_Key, CM timeouts 20 and 15 retries, ACK timeout 19 (lifetime 18
					// and rxe's ack delay 15), hop limit 64, RC.
					if m.Primary.LocalLID != 0xffff || m.Primary.RemoteLID != 0xffff || m.PKey != 0xffff || m.MaxCMRetries != 15 ||
						m.RemoteCMResponseTimeout != 20 || m.LocalCMResponseTimeout != 20 || m.Primary.LocalACKTimeout != 19 ||
						m.Primary.HopLimit != 64 || m.TransportType != TransportRC || m.StartingPSN == 0 || m.LocalQPN == 0 {
						t.Errorf("REQ %+v", m)
					}
				case *REP:
					rep = m
					if req == nil || m.Remote != req.LocalCommID {
						t.Errorf("REP's remote communication ID %#x", m.Remote)
					}
				case *RTU:
					if rep == nil || m.Local != req.LocalCommID || m.Remote != rep.Local {
						t.Errorf("RTU %+v", m.Comm)
					}
				case *DREQ:
					// The DREQ names the receiver's QPN.
					if m.RemoteQPN == 0 || m.RemoteQPN >= 1<<24 {
						t.Errorf("DREQ %+v", m.Comm)
					}
				}
				if rep, ok := m.(*REP); ok && rep.TargetACKDelay != 15 {
					t.Errorf("REP's target ACK delay %d, rxe's local_ca_ack_delay is 15", rep.TargetACKDelay)
				}
			}
			if len(seq) < 3 || seq[0] != AttrREQ || seq[1] != AttrREP || seq[2] != AttrRTU {
				t.Fatalf("messages %v, want REQ REP RTU first", seq)
			}
		})
	}
}

// TestEncodeChecksWidths: a field past its width is an error, not a
// truncation.
func TestEncodeChecksWidths(t *testing.T) {
	for _, m := range []Message{&REQ{LocalQPN: 1 << 24}, &REQ{Primary: Path{FlowLabel: 1 << 20}}, &REP{StartingPSN: 1 << 24},
		&DREQ{RemoteQPN: 1 << 24}, &REJ{MsgRejected: 4}, &MRA{ServiceTimeout: 32}} {
		if _, err := Encode(CMHeader(0, 1), m); err == nil {
			t.Errorf("%v %+v encoded", m.Attr(), m)
		}
	}
	var pd [92]byte
	if err := PutIPHeader(pd[:], IPHeader{SrcPort: 7174, Src: mustAddr("198.18.0.1"), Dst: mustAddr("2001:db8::1")}); err == nil {
		t.Error("an IP header mixing IPv4 and IPv6")
	}
}

// FuzzDecode: no input makes the decoder panic, and what decodes encodes
// to a MAD that decodes to the same message.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"rping", "rdma_cm_send"} {
		data, err := os.ReadFile(filepath.Join("..", "wire", "testdata", "pcaps", name+".pcap"))
		if err != nil {
			f.Fatal(err)
		}
		_, recs, _ := pcap.ReadAll(data)
		for _, r := range recs {
			var p wire.Packet
			if wire.Decode(r.Data, &p) == nil && p.BTH.DestQP == QP1 {
				f.Add(append([]byte(nil), p.Payload...))
			}
		}
	}
	f.Fuzz(func(t *testing.T, mad []byte) {
		h, m, err := Decode(mad)
		if err != nil {
			return
		}
		out, err := Encode(h, m)
		if err != nil {
			t.Fatalf("a decoded %v does not encode: %v", h.Attr, err)
		}
		h2, m2, err := Decode(out)
		if err != nil || h2 != h || !reflect.DeepEqual(m, m2) {
			t.Fatalf("%v: decode, encode, decode differs: %v", h.Attr, err)
		}
		_, _ = GetIPHeader(mad[HeaderLen:])
	})
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
