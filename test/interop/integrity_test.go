package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/test/interop/integrity"
	"github.com/xdproce/xdproce/verbs"
)

// Lines as verbs_peer.py prints them (json.dumps of its dicts).
const (
	lineLocal    = `{"event": "local", "t": 0.41, "type": "rc", "dev": "rxe0", "port": 1, "qpn": 17, "psn": 9876543, "gid": "::ffff:198.18.0.11", "gid_index": 1, "gid_type": "RoCE v2", "lid": 0, "mtu": 1024, "active_mtu": 4096, "addr": 94558319505408, "rkey": 4660, "len": 1048576}`
	lineSendWC   = `{"event": "wc", "t": 1.2, "cq": "send", "wr_id": 3, "status": "success", "status_num": 0, "opcode": "RDMA_READ", "opcode_num": 2, "byte_len": 102400, "wc_flags": [], "wc_flags_raw": 0, "qp_num": 17, "op": "RDMA_READ", "expected": "success", "data_crc32": 4294967295, "data_head": "0001"}`
	lineAtomicWC = `{"event": "wc", "t": 1.3, "cq": "send", "wr_id": 4, "status": "success", "status_num": 0, "opcode": "COMP_SWAP", "opcode_num": 3, "byte_len": 8, "wc_flags": [], "wc_flags_raw": 0, "qp_num": 17, "op": "ATOMIC_CMP_AND_SWP", "expected": "success", "orig": 18446744073709551615}`
	lineRecvWC   = `{"event": "wc", "t": 2.0, "cq": "recv", "wr_id": 4294967297, "status": "success", "status_num": 0, "opcode": "RECV", "opcode_num": 128, "byte_len": 100, "wc_flags": ["GRH", "WITH_IMM"], "wc_flags_raw": 3, "imm_data": 195948557, "qp_num": 17, "data_len": 100, "data_crc32": 305419896, "data_head": "abcd"}`
	lineData     = `{"event": "data", "t": 3.0, "off": 65541, "len": 4, "crc32": 3735928559, "hex": "05060708"}`
	lineError    = `{"event": "error", "t": 3.1, "msg": "timeout: 0 of 1 receive completions within 30.0s"}`
	lineDone     = `{"event": "done", "t": 4.0, "failures": 2, "recv_posted": 16, "ok": false}`
)

func TestParsePeerEvent(t *testing.T) {
	ev, err := integrity.ParsePeerEvent([]byte(lineLocal + "\n"))
	if err != nil || ev.Event != "local" || ev.QPN != 17 || ev.PSN != 9876543 || ev.GID != "::ffff:198.18.0.11" ||
		ev.Addr != 94558319505408 || ev.RKey != 4660 || ev.Len != 1<<20 || ev.MTU != 1024 {
		t.Errorf("local: %+v, %v", ev, err)
	}
	ev, err = integrity.ParsePeerEvent([]byte(lineSendWC))
	if err != nil || ev.Event != "wc" || ev.CQ != "send" || ev.Status != "success" || ev.Op != "RDMA_READ" ||
		ev.ByteLen != 102400 || ev.DataCRC32 == nil || *ev.DataCRC32 != 0xffffffff || ev.DataHead != "0001" || ev.Orig != nil || ev.ImmData != nil {
		t.Errorf("send wc: %+v, %v", ev, err)
	}
	ev, err = integrity.ParsePeerEvent([]byte(lineAtomicWC))
	if err != nil || ev.Orig == nil || *ev.Orig != 1<<64-1 || ev.Op != "ATOMIC_CMP_AND_SWP" {
		t.Errorf("atomic wc: %+v, %v", ev, err)
	}
	ev, err = integrity.ParsePeerEvent([]byte(lineRecvWC))
	if err != nil || ev.CQ != "recv" || ev.Opcode != "RECV" || ev.ImmData == nil || *ev.ImmData != 0x0badf00d ||
		ev.DataLen == nil || *ev.DataLen != 100 || *ev.DataCRC32 != 0x12345678 || ev.WRID != 1<<32+1 {
		t.Errorf("recv wc: %+v, %v", ev, err)
	}
	ev, err = integrity.ParsePeerEvent([]byte(lineData))
	if err != nil || ev.Event != "data" || ev.Off != 65541 || ev.Len != 4 || ev.CRC32 != 0xdeadbeef || ev.Hex != "05060708" {
		t.Errorf("data: %+v, %v", ev, err)
	}
	ev, err = integrity.ParsePeerEvent([]byte(lineError))
	if err != nil || ev.Event != "error" || !strings.HasPrefix(ev.Msg, "timeout:") {
		t.Errorf("error: %+v, %v", ev, err)
	}
	ev, err = integrity.ParsePeerEvent([]byte(lineDone))
	if err != nil || ev.Event != "done" || ev.Failures != 2 || ev.OK == nil || *ev.OK {
		t.Errorf("done: %+v, %v", ev, err)
	}
	// Noise is not an event; broken JSON is an error.
	if ev, err := integrity.ParsePeerEvent([]byte("Warning: Permanently added '198.19.0.11'\n")); err != nil || ev.Event != "" {
		t.Errorf("noise: %+v, %v", ev, err)
	}
	if _, err := integrity.ParsePeerEvent([]byte(`{"event": "wc", "orig": -1}`)); err == nil {
		t.Error("negative orig accepted")
	}
	if _, err := integrity.ParsePeerEvent([]byte(`{"event": "wc"`)); err == nil {
		t.Error("truncated line accepted")
	}
}

func TestRemoteLine(t *testing.T) {
	l := integrity.RemoteLine(0x11, 0xabcdef, "198.18.0.2", 0x1234, 0xc000100000, 1<<20)
	if strings.Contains(l, "\n") {
		t.Fatalf("remote line spans lines: %q", l)
	}
	// What verbs_peer reads (parse_kv: a line starting with "{" is JSON,
	// numbers are integers, the GID an IPv4 address).
	var m map[string]any
	if err := json.Unmarshal([]byte(l), &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"qpn": 17.0, "psn": float64(0xabcdef), "gid": "198.18.0.2", "rkey": float64(0x1234),
		"addr": float64(0xc000100000), "len": float64(1 << 20)}
	if fmt.Sprint(m) != fmt.Sprint(want) {
		t.Errorf("remote line %s, want %v", l, want)
	}
	if !strings.HasPrefix(l, "{") || !strings.Contains(l, `"addr":824634769408`) {
		t.Errorf("remote line %s: addr not a plain integer", l)
	}
}

func TestIntegrityLayout(t *testing.T) {
	regs := integrity.Layout()
	for i, a := range regs {
		if a.Off < 0 || a.Len <= 0 || a.Off+a.Len > integrity.BufSize {
			t.Errorf("%s: [%d, %d) outside the buffer", a.Name, a.Off, a.Off+a.Len)
		}
		for _, b := range regs[i+1:] {
			if a.Peer == b.Peer && a.Off < b.Off+b.Len && b.Off < a.Off+a.Len {
				t.Errorf("%s [%d,%d) overlaps %s [%d,%d)", a.Name, a.Off, a.Off+a.Len, b.Name, b.Off, b.Off+b.Len)
			}
		}
	}
	for _, off := range []int{integrity.PAtomic, integrity.PAtomic + 8, integrity.PAtomicTo, integrity.OAtomicTo, integrity.OPeerAtomic, integrity.OPeerAtomic + 8} {
		if off%8 != 0 {
			t.Errorf("atomic offset %d not 8-byte aligned", off)
		}
	}
	// The patterns differ at every offset, so a byte copied from the wrong
	// side is always caught.
	for i := range 256 {
		if integrity.OurPattern(i) == integrity.PeerPattern(i) {
			t.Errorf("patterns agree at %d", i)
		}
	}
}

func TestDiffBytes(t *testing.T) {
	if err := integrity.DiffBytes([]byte{1, 2, 3}, []byte{1, 2, 3}); err != nil {
		t.Error(err)
	}
	err := integrity.DiffBytes([]byte{1, 9, 3, 8}, []byte{1, 2, 3, 4})
	if err == nil || err.Error() != "2 of 4 bytes differ, first at +1: got 0x09, want 0x02" {
		t.Errorf("diff: %v", err)
	}
	if err := integrity.DiffBytes([]byte{1}, []byte{1, 2}); err == nil || !strings.Contains(err.Error(), "1 bytes, want 2") {
		t.Errorf("length diff: %v", err)
	}
}

func TestIntegrityCells(t *testing.T) {
	cells := buildMatrix(matrixConfig{BWIters: 100, LatIters: 200})
	sel := selectCells(cells, regexp.MustCompile("integrity"))
	if len(sel) != 2 || sel[0].ID() != "integrity/xdp-vm1/mtu4096" || sel[1].ID() != "integrity/xdp-vm1/mtu1024" {
		t.Fatalf("--only integrity: %v", sel)
	}
	for _, c := range sel {
		if !c.hasXDP() || c.Client.vm() != 1 || c.timeout() <= integrity.WaitLimit {
			t.Errorf("%s: roles %v/%v timeout %v", c.ID(), c.Server, c.Client, c.timeout())
		}
		if got := strings.Join(c.args(), " "); got != integrity.PeerCommand(c.MTU) || !strings.Contains(got, "--remote - ") || !strings.Contains(got, " -i") {
			t.Errorf("%s: args %q", c.ID(), got)
		}
		if r := newResult(c); r.Sizes != "8..102400" || r.Reference || r.Direction == "" {
			t.Errorf("%s: result %+v", c.ID(), r)
		}
	}
	for _, c := range buildMatrix(matrixConfig{Smoke: true, BWIters: 20, LatIters: 100}) {
		if c.Tool == integrity.IntegrityTool {
			t.Errorf("integrity cell %s in --smoke", c.ID())
		}
	}
	var out, errb strings.Builder
	if code := run(context.Background(), []string{"--list", "--only", "^integrity/"}, &out, &errb); code != 0 ||
		strings.Count(out.String(), "\n") != 2 || !strings.Contains(out.String(), "verbs_peer.py -t rc --remote - --recv 16 -m 1024 -i") {
		t.Errorf("--list: exit %d:\n%s%s", code, out.String(), errb.String())
	}
	r := result{Checks: []integrity.Check{{Name: "a", OK: true}, {Name: "b"}}}
	if f := figure(r); f != "1/2 checks" {
		t.Errorf("figure %q", f)
	}
}

// TestIntegrityAgainstFakePeer runs a whole cell against a Go stand-in for
// verbs_peer.py (same stdin/stdout protocol, an xdproce device of its own,
// over an in-memory link): it checks the harness's offsets, models and
// parsing without VMs. The real peer is covered by the interop run.
func TestIntegrityAgainstFakePeer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mtu     int
		strayAt int // the fake peer corrupts its buffer here before the final dump
		badCRC  bool
	}{
		{"mtu4096", 4096, -1, false},
		{"mtu1024", 1024, -1, false},
		{"stray-write", 4096, 4242, false},
		{"bad-crc", 1024, -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checks, err := runAgainstFake(t, tc.mtu, tc.strayAt, tc.badCRC)
			var failed []integrity.Check
			for _, c := range checks {
				if !c.OK {
					failed = append(failed, c)
				}
			}
			if err != nil {
				t.Fatalf("fatal: %v (checks %+v)", err, checks)
			}
			if len(checks) < 20 {
				t.Errorf("only %d checks", len(checks))
			}
			switch {
			case tc.strayAt >= 0:
				if len(failed) != 1 || !strings.HasPrefix(failed[0].Name, "verbs_peer's whole") ||
					failed[0].Detail != fmt.Sprintf("1 of 1048576 bytes differ, first at +%d: got %#02x, want %#02x", tc.strayAt, ^integrity.PeerPattern(tc.strayAt), integrity.PeerPattern(tc.strayAt)) {
					t.Errorf("stray write reported as %+v", failed)
				}
			case tc.badCRC:
				if len(failed) != 1 || failed[0].Name != "xdproce→rxe SEND 9000 B" || !strings.HasPrefix(failed[0].Detail, "data_crc32 ") {
					t.Errorf("bad CRC reported as %+v", failed)
				}
			default:
				if len(failed) > 0 {
					t.Errorf("failed checks: %+v", failed)
				}
			}
		})
	}
}

func runAgainstFake(t *testing.T, mtu, strayAt int, badCRC bool) ([]integrity.Check, error) {
	macOurs, macPeer := net.HardwareAddr{2, 0, 0, 0, 0, 2}, net.HardwareAddr{2, 0, 0, 0, 0, 0x11}
	la, lb := memlink.NewPair(9018)
	newDev := func(link link.Link, mac, other net.HardwareAddr, ip string) *verbs.Device {
		d, err := verbs.NewDevice(link, verbs.DeviceConfig{MAC: mac, ActiveMTU: 4096,
			GIDs: []netip.Addr{netip.MustParseAddr("fe80::1"), netip.MustParseAddr(ip)},
			Resolve: func(context.Context, netip.Addr) (net.HardwareAddr, error) {
				return other, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
	ours := newDev(la, macOurs, macPeer, "198.18.0.2")
	theirs := newDev(lb, macPeer, macOurs, "198.18.0.11")

	inR, inW := io.Pipe()   // harness -> fake stdin
	outR, outW := io.Pipe() // fake stdout -> harness
	fp := &fakePeer{t: t, dev: theirs, mtu: mtu, in: bufio.NewReader(inR), out: outW, strayAt: strayAt, badCRC: badCRC}
	fakeDone := make(chan struct{})
	go func() {
		defer close(fakeDone)
		defer outW.Close()
		if err := fp.run(); err != nil {
			t.Errorf("fake peer: %v", err)
			fp.emit(map[string]any{"event": "error", "msg": err.Error()})
		}
	}()
	// The stream's reader goroutine may still log after the test ended.
	var ended atomic.Bool
	defer ended.Store(true)
	logf := func(format string, args ...any) {
		if !ended.Load() {
			t.Logf(format, args...)
		}
	}
	stream := integrity.NewPeerStream(inW, outR, logf)
	r := &integrity.Cell{MTU: mtu, Dev: ours, MyGID: "198.18.0.2", PeerAddr: netip.MustParseAddr("198.18.0.11"), Peer: stream, Logf: logf}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := r.Run(ctx)
	inW.Close()
	select {
	case <-fakeDone:
	case <-time.After(30 * time.Second):
		t.Error("fake peer did not end")
	}
	return r.Checks, err
}

// fakePeer speaks verbs_peer.py's --remote - -i protocol for the ops the
// integrity cells use, with the same semantics: a READ lands at the local
// off, an atomic's original value is stored at the local off, receives go
// to a separate region, dump prints hex and zlib's CRC-32.
type fakePeer struct {
	t        *testing.T
	dev      *verbs.Device
	mtu      int
	in       *bufio.Reader
	out      io.Writer
	strayAt  int
	badCRC   bool
	qp       *verbs.QP
	scq, rcq *verbs.CQ
	mr, rmr  *verbs.MR
	remote   struct {
		QPN, PSN, RKey uint32
		Addr           uint64
		GID            string
	}
	wrid     uint64
	failures int
}

const fakeRecvSize = 65536

func (f *fakePeer) emit(m map[string]any) {
	b, err := json.Marshal(m)
	if err != nil {
		f.t.Error(err)
		return
	}
	_, _ = f.out.Write(append(b, '\n'))
}

func (f *fakePeer) run() error {
	pd, err := f.dev.AllocPD()
	if err != nil {
		return err
	}
	f.scq, _ = f.dev.CreateCQ(256)
	f.rcq, _ = f.dev.CreateCQ(256)
	if f.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: f.scq, RecvCQ: f.rcq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if f.mr, err = pd.AllocMR(integrity.BufSize, access); err != nil {
		return err
	}
	integrity.FillPattern(f.mr.Bytes(), integrity.PeerPattern)
	if f.rmr, err = pd.AllocMR(integrity.PeerRecvs*fakeRecvSize, verbs.AccessLocalWrite); err != nil {
		return err
	}
	if err := f.qp.Modify(verbs.QPAttr{State: verbs.StateInit, Port: 1, AccessFlags: access},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		return err
	}
	for i := range integrity.PeerRecvs {
		if _, err := f.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i) << 32, SGList: []verbs.SGE{{
			Addr: f.rmr.Addr() + uint64(i*fakeRecvSize), Length: fakeRecvSize, LKey: f.rmr.LKey()}}}}); err != nil {
			return err
		}
	}
	f.emit(map[string]any{"event": "post", "op": "RECV", "n": integrity.PeerRecvs, "len": fakeRecvSize})
	psn := uint32(0x123456)
	f.emit(map[string]any{"event": "local", "type": "rc", "qpn": f.qp.QPN(), "psn": psn, "gid": "::ffff:198.18.0.11",
		"gid_index": 1, "mtu": f.mtu, "active_mtu": 4096, "addr": f.mr.Addr(), "rkey": f.mr.RKey(), "len": integrity.BufSize})
	line, err := f.in.ReadString('\n')
	if err != nil {
		return fmt.Errorf("remote line: %w", err)
	}
	if err := json.Unmarshal([]byte(line), &f.remote); err != nil {
		return fmt.Errorf("remote line %q: %w", line, err)
	}
	if f.remote.GID != "198.18.0.2" || f.remote.Addr == 0 || f.remote.RKey == 0 {
		return fmt.Errorf("remote line %q", line)
	}
	if err := f.qp.Connect(verbs.Peer{AH: verbs.AH{DGID: netip.MustParseAddr(f.remote.GID), SGIDIndex: 1},
		PathMTU: verbs.MTUFromBytes(f.mtu), DestQPN: f.remote.QPN, RQPSN: f.remote.PSN, SQPSN: psn,
		MaxDestRdAtomic: 16, MinRNRTimer: 12, Timeout: 14, RetryCnt: 6, RNRRetry: 7, MaxRdAtomic: 16}); err != nil {
		return err
	}
	f.emit(map[string]any{"event": "connected"})
	f.emit(map[string]any{"event": "ready", "qp_state": "RTS"})
	for {
		line, err := f.in.ReadString('\n')
		if strings.TrimSpace(line) != "" {
			if err := f.op(strings.TrimSpace(line)); err != nil {
				return err
			}
		}
		if err != nil {
			break
		}
	}
	f.emit(map[string]any{"event": "done", "failures": f.failures, "ok": f.failures == 0})
	return nil
}

func wcStatus(s verbs.WCStatus) string { return strings.ToLower(s.String()) }

func (f *fakePeer) poll(cq *verbs.CQ) (verbs.WorkCompletion, error) {
	var wc [1]verbs.WorkCompletion
	deadline := time.Now().Add(20 * time.Second)
	for cq.Poll(wc[:]) == 0 {
		if time.Now().After(deadline) {
			return wc[0], fmt.Errorf("fake peer: no completion")
		}
		time.Sleep(100 * time.Microsecond)
	}
	return wc[0], nil
}

func (f *fakePeer) op(line string) error {
	name, rest, _ := strings.Cut(line, ":")
	p := map[string]uint64{}
	for kv := range strings.SplitSeq(rest, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			n, err := strconv.ParseUint(v, 0, 64)
			if err != nil {
				return fmt.Errorf("op %q: %w", line, err)
			}
			p[k] = n
		}
	}
	buf := f.mr.Bytes()
	type sendOp struct {
		verb   string
		opcode verbs.WROpcode
	}
	ops := map[string]sendOp{"send": {"SEND", verbs.WRSend}, "send_imm": {"SEND_WITH_IMM", verbs.WRSendWithImm},
		"write": {"RDMA_WRITE", verbs.WRRDMAWrite}, "write_imm": {"RDMA_WRITE_WITH_IMM", verbs.WRRDMAWriteWithImm},
		"read": {"RDMA_READ", verbs.WRRDMARead}, "cas": {"ATOMIC_CMP_AND_SWP", verbs.WRAtomicCmpAndSwp},
		"faa": {"ATOMIC_FETCH_AND_ADD", verbs.WRAtomicFetchAdd}}
	wcNames := map[verbs.WCOpcode]string{verbs.WCSend: "SEND", verbs.WCRDMAWrite: "RDMA_WRITE", verbs.WCRDMARead: "RDMA_READ",
		verbs.WCCompSwap: "COMP_SWAP", verbs.WCFetchAdd: "FETCH_ADD", verbs.WCRecv: "RECV", verbs.WCRecvRDMAWithImm: "RECV_RDMA_WITH_IMM"}
	switch {
	case ops[name].verb != "":
		o := ops[name]
		length, off := p["len"], p["off"]
		if name == "cas" || name == "faa" {
			length = 8
		}
		f.wrid++
		wr := verbs.SendWR{ID: f.wrid, Opcode: o.opcode, Flags: verbs.SendSignaled,
			SGList:     []verbs.SGE{{Addr: f.mr.Addr() + off, Length: uint32(length), LKey: f.mr.LKey()}},
			RemoteAddr: f.remote.Addr + p["roff"], RKey: f.remote.RKey, ImmData: uint32(p["imm"])}
		switch name {
		case "cas":
			wr.CompareAdd, wr.Swap = p["compare"], p["swap"]
		case "faa":
			wr.CompareAdd = p["add"]
		}
		f.emit(map[string]any{"event": "post", "op": o.verb, "wr_id": f.wrid, "len": length, "off": off})
		if _, err := f.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			return err
		}
		wc, err := f.poll(f.scq)
		if err != nil {
			return err
		}
		ev := map[string]any{"event": "wc", "cq": "send", "wr_id": wc.WRID, "status": wcStatus(wc.Status),
			"opcode": wcNames[wc.Opcode], "byte_len": wc.ByteLen, "op": o.verb, "expected": "success"}
		if wc.Status != verbs.WCSuccess {
			f.failures++
		} else if name == "read" {
			data := buf[off : off+length]
			ev["data_crc32"], ev["data_head"] = crc32.ChecksumIEEE(data), hex.EncodeToString(data[:min(32, len(data))])
		} else if length == 8 && (name == "cas" || name == "faa") {
			ev["orig"] = binary.LittleEndian.Uint64(buf[off:])
		}
		f.emit(ev)
	case name == "poll":
		for range max(p["n"], 1) {
			wc, err := f.poll(f.rcq)
			if err != nil {
				f.failures++
				f.emit(map[string]any{"event": "error", "msg": err.Error()})
				return nil
			}
			ev := map[string]any{"event": "wc", "cq": "recv", "wr_id": wc.WRID, "status": wcStatus(wc.Status),
				"opcode": wcNames[wc.Opcode], "byte_len": wc.ByteLen}
			if wc.Flags&verbs.WCWithImm != 0 {
				ev["imm_data"] = wc.ImmData
			}
			if wc.Status == verbs.WCSuccess && wc.Opcode == verbs.WCRecv {
				slot := int(wc.WRID >> 32)
				data := f.rmr.Bytes()[slot*fakeRecvSize : slot*fakeRecvSize+int(wc.ByteLen)]
				crc := crc32.ChecksumIEEE(data)
				if f.badCRC {
					crc ^= 1
					f.badCRC = false
				}
				ev["data_len"], ev["data_crc32"], ev["data_head"] = len(data), crc, hex.EncodeToString(data[:min(32, len(data))])
			}
			f.emit(ev)
		}
	case name == "dump":
		off, n := p["off"], p["len"]
		if n == integrity.BufSize && f.strayAt >= 0 {
			buf[f.strayAt] = ^buf[f.strayAt]
		}
		data := buf[off : off+n]
		f.emit(map[string]any{"event": "data", "off": off, "len": n, "crc32": crc32.ChecksumIEEE(data), "hex": hex.EncodeToString(data)})
	default:
		return fmt.Errorf("fake peer: unknown op %q", line)
	}
	return nil
}
