package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// peerEvent is the subset of rxe-peer verbs_peer.py JSON lines the tests use.
type peerEvent struct {
	VM        int         `json:"vm"`
	Event     string      `json:"event"`
	Type      string      `json:"type"`
	QPN       uint32      `json:"qpn"`
	QKey      uint32      `json:"qkey"`
	FlowLabel uint32      `json:"flow_label"`
	Op        string      `json:"op"`
	CQ        string      `json:"cq"`
	Status    string      `json:"status"`
	Imm       *uint32     `json:"imm"`
	Inv       *uint32     `json:"inv"`
	DataLen   *int        `json:"data_len"`
	DataCRC   *uint32     `json:"data_crc32"`
	Orig      json.Number `json:"orig"`
}

func readPeerLog(t *testing.T, name string) []peerEvent {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "pcaps", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []peerEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		d.UseNumber()
		var e peerEvent
		if err := d.Decode(&e); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		evs = append(evs, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return evs
}

type message struct {
	len int
	crc uint32
}

// TestGoldenAgainstPeerLogs checks the decoded fields against what the two
// rxe peers logged through the verbs API while the capture ran: the UDP
// source port formulas, immediate data, invalidated rkeys, atomic original
// values, and the data of every received SEND and completed READ, reassembled
// from the decoded payloads (which exercises PadCnt handling).
func TestGoldenAgainstPeerLogs(t *testing.T) {
	logs, err := filepath.Glob(filepath.Join("testdata", "pcaps", "*.jsonl"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no peer logs: %v", err)
	}
	total := 0
	for _, logPath := range logs {
		base := strings.TrimSuffix(filepath.Base(logPath), ".jsonl")
		t.Run(base, func(t *testing.T) {
			evs := readPeerLog(t, base+".jsonl")
			pkts, _ := readGolden(t, base+".pcap")
			var qpns []uint32
			var flowLabel, qkey uint32
			imms, invs, origs := map[uint32]bool{}, map[uint32]bool{}, map[string]bool{}
			for _, e := range evs {
				switch {
				case e.Event == "local":
					qpns = append(qpns, e.QPN)
					qkey = e.QKey
				case e.Event == "connected":
					flowLabel = e.FlowLabel
				case e.Event == "post" && e.Imm != nil:
					imms[*e.Imm] = true
				case e.Event == "post" && e.Inv != nil:
					invs[*e.Inv] = true
				}
			}
			if len(qpns) != 2 {
				t.Fatalf("QPNs %v", qpns)
			}

			// Reassemble messages per destination QP.
			sends, reads := map[message]bool{}, map[message]bool{}
			cur := map[uint32][]byte{}
			seenImm, seenInv := map[uint32]bool{}, map[uint32]bool{}
			for _, gp := range pkts {
				p := &gp.p
				info, _ := p.BTH.Opcode.Info()
				switch p.BTH.Opcode.Transport() {
				case TransportRC, TransportUC:
					if want := UDPSourcePort(flowLabel, qpns[0], qpns[1]); p.UDP.SrcPort != want {
						t.Errorf("frame %d: RC/UC source port %d, want %d", gp.frame, p.UDP.SrcPort, want)
					}
				case TransportUD:
					if want := UDSourcePort(p.DETH.SrcQP); p.UDP.SrcPort != want {
						t.Errorf("frame %d: UD source port %d, want %d", gp.frame, p.UDP.SrcPort, want)
					}
					if p.DETH.QKey != qkey || (p.DETH.SrcQP != qpns[0] && p.DETH.SrcQP != qpns[1]) {
						t.Errorf("frame %d: DETH %+v", gp.frame, p.DETH)
					}
				}
				if info.Has(HasImmDt) {
					seenImm[p.ImmDt] = true
					if !imms[p.ImmDt] {
						t.Errorf("frame %d: ImmDt %#x was never posted", gp.frame, p.ImmDt)
					}
				}
				if info.Has(HasIETH) {
					seenInv[p.IETH] = true
					if !invs[p.IETH] {
						t.Errorf("frame %d: IETH %#x was never posted", gp.frame, p.IETH)
					}
				}
				if info.Has(HasAtomicAckETH) {
					origs[jsonUint(p.AtomicAck)] = true
				}
				isSend, isRead := info.Is(FlagSend), p.BTH.Opcode >= RCReadResponseFirst && p.BTH.Opcode <= RCReadResponseOnly
				if !isSend && !isRead {
					continue
				}
				q := p.BTH.DestQP
				if info.Is(FlagStart) {
					cur[q] = nil
				}
				cur[q] = append(cur[q], p.Payload...)
				if info.Is(FlagEnd) {
					m := message{len(cur[q]), crc32.ChecksumIEEE(cur[q])}
					if isSend {
						sends[m] = true
					} else {
						reads[m] = true
					}
				}
			}
			for v := range imms {
				if !seenImm[v] {
					t.Errorf("posted immediate %#x not on the wire", v)
				}
			}
			for v := range invs {
				if !seenInv[v] {
					t.Errorf("posted invalidate %#x not on the wire", v)
				}
			}

			checked := 0
			for _, e := range evs {
				if e.Event != "wc" || e.Status != "success" {
					continue
				}
				switch {
				case e.CQ == "recv" && e.DataCRC != nil:
					if !sends[message{*e.DataLen, *e.DataCRC}] {
						t.Errorf("received %d bytes crc %#x: no SEND message on the wire matches", *e.DataLen, *e.DataCRC)
					}
					checked++
				case e.CQ == "send" && e.Op == "RDMA_READ" && e.DataCRC != nil:
					found := false
					for m := range reads {
						found = found || m.crc == *e.DataCRC
					}
					if !found {
						t.Errorf("READ data crc %#x: no READ response message matches", *e.DataCRC)
					}
					checked++
				case e.Orig != "":
					if !origs[e.Orig.String()] {
						t.Errorf("atomic original value %s not in any ATOMIC_ACKNOWLEDGE", e.Orig)
					}
					checked++
				}
			}
			t.Logf("%d packets, %d completions with data checked", len(pkts), checked)
			total += checked
		})
	}
	if total < 20 {
		t.Errorf("only %d completions cross-checked", total)
	}
}

func jsonUint(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}
