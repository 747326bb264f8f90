package integrity

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	vnetns "github.com/vishvananda/netns"
	"github.com/xdproce/xdproce/internal/nsenter"
	"github.com/xdproce/xdproce/test/interop/proc"
	"github.com/xdproce/xdproce/verbs"
)

const (
	IntegrityTool = "integrity"
	IntegrityVM   = 1
	BufSize       = 1 << 20 // both sides' buffers
	BigLen        = 100 << 10
	sendLen       = 9000
	immWriteLen   = 5000
	immSendLen    = 100
	recvSlots     = 8     // our receive WRs
	recvSlotLen   = 16384 // bytes per receive WR
	PeerRecvs     = 16    // verbs_peer --recv
	// WaitLimit bounds every single wait: a completion, a peer event.
	WaitLimit = 60 * time.Second
)

// Offsets of every operation's regions, chosen disjoint (TestIntegrityLayout)
// and partly odd, so that a misplaced or overlong transfer shows up in the
// whole-buffer comparison at the end.
const (
	// verbs_peer's buffer.
	pWrite    = 65541   // our RDMA WRITE lands here
	pRead     = 300000  // our RDMA READ reads here
	pWriteImm = 500000  // our WRITE_WITH_IMM lands here
	PAtomic   = 600000  // our CAS at +0, FETCH_ADD at +8
	pSrc      = 700001  // source of the peer's WRITE/SENDs (never written)
	pReadTo   = 900000  // where the peer's READ of us lands
	PAtomicTo = 1040000 // where the peer's atomics store the original values (+0, +8, +16)
	// Our buffer.
	oSrc          = 0      // source of our WRITE/SENDs (never written)
	oReadTo       = 131072 // where our READs land (+0 the 100 KiB, +BigLen+64 the atomics' READ)
	OAtomicTo     = 262144 // where our atomics return the original values (+0, +8, +16)
	oRecv         = 327680 // recvSlots receive buffers of recvSlotLen
	oPeerWrite    = 524291 // the peer's RDMA WRITE lands here
	oPeerRead     = 655361 // the peer's RDMA READ reads here
	oPeerWriteImm = 786437 // the peer's WRITE_WITH_IMM lands here
	OPeerAtomic   = 819200 // the peer's CAS at +0, FETCH_ADD at +8
)

// Region is one range an operation uses, for the layout test.
type Region struct {
	Name     string
	Peer     bool // in verbs_peer's buffer, else ours
	Off, Len int
}

func Layout() []Region {
	return []Region{
		{"our WRITE target", true, pWrite, BigLen},
		{"our READ source", true, pRead, BigLen},
		{"our WRITE_WITH_IMM target", true, pWriteImm, immWriteLen},
		{"our atomics target", true, PAtomic - 8, 32}, // read back with a guard word either side
		{"peer source", true, pSrc, BigLen},
		{"peer READ landing", true, pReadTo, BigLen},
		{"peer atomics landing", true, PAtomicTo, 24},
		{"our source", false, oSrc, BigLen},
		{"our READ landing", false, oReadTo, BigLen + 64 + 32},
		{"our atomics landing", false, OAtomicTo, 24},
		{"our receive buffers", false, oRecv, recvSlots * recvSlotLen},
		{"peer WRITE target", false, oPeerWrite, BigLen},
		{"peer READ source", false, oPeerRead, BigLen},
		{"peer WRITE_WITH_IMM target", false, oPeerWriteImm, immWriteLen},
		{"peer atomics target", false, OPeerAtomic, 16},
	}
}

func OurPattern(i int) byte { return byte(i*7 + 3) }

func PeerPattern(i int) byte { return byte(i) }

func FillPattern(b []byte, f func(int) byte) {
	for i := range b {
		b[i] = f(i)
	}
}

// PeerCommand is the verbs_peer command line of a cell.
func PeerCommand(mtu int) string {
	return fmt.Sprintf("verbs_peer.py -t rc --remote - --recv %d -m %d -i", PeerRecvs, mtu)
}

// PeerEvent is one JSON line of verbs_peer.py; only the fields used here.
type PeerEvent struct {
	Event string `json:"event"`
	Msg   string `json:"msg"`
	// local
	QPN  uint32 `json:"qpn"`
	PSN  uint32 `json:"psn"`
	GID  string `json:"gid"`
	Addr uint64 `json:"addr"`
	RKey uint32 `json:"rkey"`
	Len  int    `json:"len"` // local: buffer size; data: dump length
	MTU  int    `json:"mtu"`
	// wc
	CQ        string  `json:"cq"`
	WRID      uint64  `json:"wr_id"`
	Status    string  `json:"status"`
	Opcode    string  `json:"opcode"`
	Op        string  `json:"op"` // the posted WR's verb, on send completions
	ByteLen   uint32  `json:"byte_len"`
	ImmData   *uint32 `json:"imm_data"`
	DataLen   *int    `json:"data_len"`
	DataCRC32 *uint32 `json:"data_crc32"`
	DataHead  string  `json:"data_head"`
	Orig      *uint64 `json:"orig"`
	// data (dump)
	Off   int    `json:"off"`
	CRC32 uint32 `json:"crc32"`
	Hex   string `json:"hex"`
	// done
	Failures int   `json:"failures"`
	OK       *bool `json:"ok"`

	Raw string `json:"-"` // the line, shortened for messages
}

// ParsePeerEvent decodes one stdout line; a line that is not a JSON object
// (ssh or Python noise) gives an event with an empty Event.
func ParsePeerEvent(line []byte) (PeerEvent, error) {
	line = bytes.TrimSpace(line)
	var ev PeerEvent
	ev.Raw = shorten(string(line), 300)
	if len(line) == 0 || line[0] != '{' {
		return ev, nil
	}
	if err := json.Unmarshal(line, &ev); err != nil {
		return ev, fmt.Errorf("verbs_peer line %q: %w", ev.Raw, err)
	}
	return ev, nil
}

func shorten(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// RemoteLine is the line that tells verbs_peer (--remote -) about our QP.
func RemoteLine(qpn, psn uint32, gid string, rkey uint32, addr uint64, length int) string {
	b, _ := json.Marshal(struct {
		QPN  uint32 `json:"qpn"`
		PSN  uint32 `json:"psn"`
		GID  string `json:"gid"`
		RKey uint32 `json:"rkey"`
		Addr uint64 `json:"addr"`
		Len  int    `json:"len"`
	}{qpn, psn, gid, rkey, addr, length})
	return string(b)
}

// PeerStream talks to verbs_peer: op lines to its stdin, events from its
// stdout, parsed by a reader goroutine.
type PeerStream struct {
	in     io.WriteCloser
	events chan PeerEvent
	mu     sync.Mutex
	err    error            // why the event stream ended (nil: EOF)
	trace  *proc.TailBuffer // every line both ways, shortened
	logf   func(format string, args ...any)
}

func NewPeerStream(in io.WriteCloser, out io.Reader, logf func(string, ...any)) *PeerStream {
	s := &PeerStream{in: in, events: make(chan PeerEvent, 256), trace: &proc.TailBuffer{}, logf: logf}
	go func() {
		defer close(s.events)
		br := bufio.NewReaderSize(out, 64<<10)
		for {
			line, err := br.ReadBytes('\n') // no line limit: a dump of 1 MiB is a 2 MiB line
			if len(bytes.TrimSpace(line)) > 0 {
				ev, perr := ParsePeerEvent(line)
				fmt.Fprintf(s.trace, "< %s\n", ev.Raw)
				s.logf("vm%d < %s", IntegrityVM, shorten(ev.Raw, 160))
				if perr != nil {
					s.setErr(perr)
					return
				}
				s.events <- ev
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					s.setErr(err)
				}
				return
			}
		}
	}()
	return s
}

func (s *PeerStream) setErr(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

func (s *PeerStream) send(line string) error {
	fmt.Fprintf(s.trace, "> %s\n", line)
	s.logf("vm%d > %s", IntegrityVM, line)
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		return fmt.Errorf("write to verbs_peer: %w", err)
	}
	return nil
}

// await returns the next event that match accepts, bounded by WaitLimit.
// An "error" event, the end of the output or the deadline is an error.
func (s *PeerStream) await(ctx context.Context, what string, match func(PeerEvent) bool) (PeerEvent, error) {
	t := time.NewTimer(WaitLimit)
	defer t.Stop()
	for {
		select {
		case ev, ok := <-s.events:
			switch {
			case !ok:
				s.mu.Lock()
				err := s.err
				s.mu.Unlock()
				if err != nil {
					return ev, fmt.Errorf("waiting for %s: verbs_peer output ended: %w", what, err)
				}
				return ev, fmt.Errorf("waiting for %s: verbs_peer exited", what)
			case ev.Event == "error":
				return ev, fmt.Errorf("waiting for %s: verbs_peer error: %s", what, ev.Msg)
			case match(ev):
				return ev, nil
			case ev.Event == "done":
				return ev, fmt.Errorf("waiting for %s: verbs_peer ended (done, %d failures)", what, ev.Failures)
			}
		case <-t.C:
			return PeerEvent{}, fmt.Errorf("no %s from verbs_peer within %v", what, WaitLimit)
		case <-ctx.Done():
			return PeerEvent{}, fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

// op sends one OP line and waits for its completion event.
func (s *PeerStream) op(ctx context.Context, line string, what string, match func(PeerEvent) bool) (PeerEvent, error) {
	if err := s.send(line); err != nil {
		return PeerEvent{}, err
	}
	return s.await(ctx, what+" ("+line+")", match)
}

func isEvent(name string) func(PeerEvent) bool {
	return func(ev PeerEvent) bool { return ev.Event == name }
}

func isWC(cq string) func(PeerEvent) bool {
	return func(ev PeerEvent) bool { return ev.Event == "wc" && ev.CQ == cq }
}

// Check is one verified property of a cell, as listed in --json.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Cell is one cell's state: our verbs objects, the peer and the
// models of both buffers.
type Cell struct {
	MTU      int
	Dev      *verbs.Device
	MyGID    string     // what verbs_peer is told (our IPv4)
	PeerAddr netip.Addr // verbs_peer's IP, our QP's destination
	Peer     *PeerStream
	Logf     func(format string, args ...any)

	pd       *verbs.PD
	scq, rcq *verbs.CQ
	qp       *verbs.QP
	mr       *verbs.MR
	ours     []byte // the registered memory
	wantOurs []byte // what ours must hold
	wantPeer []byte // what verbs_peer's buffer must hold
	remote   PeerEvent
	wrid     uint64
	Checks   []Check
}

// record adds a check; err nil means it passed.
func (r *Cell) record(name string, err error) {
	c := Check{Name: name, OK: err == nil}
	if err != nil {
		c.Detail = err.Error()
	}
	r.Checks = append(r.Checks, c)
	if err != nil {
		r.Logf("check FAILED: %s: %v", name, err)
	} else {
		r.Logf("check ok: %s", name)
	}
}

func (r *Cell) Failed() []Check {
	var f []Check
	for _, c := range r.Checks {
		if !c.OK {
			f = append(f, c)
		}
	}
	return f
}

// DiffBytes describes how got differs from want, nil if it does not.
func DiffBytes(got, want []byte) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d bytes, want %d", len(got), len(want))
	}
	n, first := 0, -1
	for i := range got {
		if got[i] != want[i] {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d bytes differ, first at +%d: got %#02x, want %#02x", n, len(want), first, got[first], want[first])
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

func putLE64(b []byte, v uint64) { binary.LittleEndian.PutUint64(b, v) }

// Run drives the whole cell. A returned error is fatal (the connection or
// the peer is unusable); data mismatches are recorded as failed checks and
// the cell goes on.
func (r *Cell) Run(ctx context.Context) error {
	if err := r.setup(); err != nil {
		return err
	}
	if err := r.connect(ctx); err != nil {
		return err
	}
	if err := r.toPeer(ctx); err != nil {
		return err
	}
	if err := r.fromPeer(ctx); err != nil {
		return err
	}
	return r.final(ctx)
}

func (r *Cell) setup() error {
	var err error
	if r.pd, err = r.Dev.AllocPD(); err != nil {
		return fmt.Errorf("alloc PD: %w", err)
	}
	if r.scq, err = r.Dev.CreateCQ(256); err != nil {
		return fmt.Errorf("create CQ: %w", err)
	}
	if r.rcq, err = r.Dev.CreateCQ(256); err != nil {
		return fmt.Errorf("create CQ: %w", err)
	}
	if r.qp, err = r.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: r.scq, RecvCQ: r.rcq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fmt.Errorf("create QP: %w", err)
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if r.mr, err = r.pd.AllocMR(BufSize, access); err != nil {
		return fmt.Errorf("alloc MR: %w", err)
	}
	if r.mr.Addr()%8 != 0 {
		return fmt.Errorf("our MR at %#x is not 8-byte aligned (atomics need it)", r.mr.Addr())
	}
	r.ours = r.mr.Bytes()
	FillPattern(r.ours, OurPattern)
	r.wantOurs = bytes.Clone(r.ours)
	r.wantPeer = make([]byte, BufSize)
	FillPattern(r.wantPeer, PeerPattern)
	if err := r.qp.Modify(verbs.QPAttr{State: verbs.StateInit, Port: 1, AccessFlags: access},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		return fmt.Errorf("QP to INIT: %w", err)
	}
	wrs := make([]verbs.RecvWR, recvSlots)
	for i := range wrs {
		wrs[i] = verbs.RecvWR{ID: uint64(i), SGList: r.sge(oRecv+i*recvSlotLen, recvSlotLen)}
	}
	if _, err := r.qp.PostRecv(wrs); err != nil {
		return fmt.Errorf("post receives: %w", err)
	}
	return nil
}

func (r *Cell) sge(off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: r.mr.Addr() + uint64(off), Length: uint32(n), LKey: r.mr.LKey()}}
}

// sgidIndex is the index of our IPv4 GID.
func (r *Cell) sgidIndex() (int, error) {
	want := netip.MustParseAddr(r.MyGID)
	for i := 0; i < r.Dev.QueryPort().GIDTblLen; i++ {
		g, err := r.Dev.QueryGID(i)
		if err != nil {
			break
		}
		if g.Unmap() == want {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no GID %s in our GID table", r.MyGID)
}

// connect exchanges the addressing with verbs_peer, takes our QP to RTS and
// waits until verbs_peer is at RTS too.
func (r *Cell) connect(ctx context.Context) error {
	loc, err := r.Peer.await(ctx, `the "local" line`, isEvent("local"))
	if err != nil {
		return err
	}
	r.remote = loc
	switch {
	case loc.QPN == 0 || loc.RKey == 0 || loc.Addr == 0:
		return fmt.Errorf("verbs_peer local line lacks qpn/rkey/addr: %s", loc.Raw)
	case loc.Len < BufSize:
		return fmt.Errorf("verbs_peer buffer is %d bytes, want %d", loc.Len, BufSize)
	case loc.Addr%8 != 0:
		return fmt.Errorf("verbs_peer buffer at %#x is not 8-byte aligned", loc.Addr)
	case loc.MTU != r.MTU:
		return fmt.Errorf("verbs_peer path MTU %d, want %d", loc.MTU, r.MTU)
	}
	sgid, err := r.sgidIndex()
	if err != nil {
		return err
	}
	psn := rand.Uint32() & 0xffffff
	err = r.qp.Connect(verbs.Peer{AH: verbs.AH{DGID: r.PeerAddr, SGIDIndex: sgid, HopLimit: 64},
		PathMTU: verbs.MTUFromBytes(r.MTU), DestQPN: loc.QPN, RQPSN: loc.PSN & 0xffffff, SQPSN: psn,
		MaxDestRdAtomic: 16, MinRNRTimer: 12, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16})
	if err != nil {
		return err
	}
	if err := r.Peer.send(RemoteLine(r.qp.QPN(), psn, r.MyGID, r.mr.RKey(), r.mr.Addr(), BufSize)); err != nil {
		return err
	}
	if _, err := r.Peer.await(ctx, `"ready"`, isEvent("ready")); err != nil {
		return err
	}
	r.Logf("connected: our QP %#x psn %#x, verbs_peer QP %#x psn %#x, path MTU %d", r.qp.QPN(), psn, loc.QPN, loc.PSN, r.MTU)
	return nil
}

// post posts one signaled send WR and waits for its successful completion.
func (r *Cell) post(ctx context.Context, what string, wr verbs.SendWR, want verbs.WCOpcode) error {
	r.wrid++
	wr.ID, wr.Flags = r.wrid, wr.Flags|verbs.SendSignaled
	if _, err := r.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		return fmt.Errorf("%s: post: %w", what, err)
	}
	wc, err := pollCQ(ctx, r.scq)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if wc.WRID != wr.ID || wc.Status != verbs.WCSuccess || wc.Opcode != want {
		return fmt.Errorf("%s: completion wr_id %d %v opcode %d (vendor_err %d), want wr_id %d SUCCESS opcode %d",
			what, wc.WRID, wc.Status, wc.Opcode, wc.VendorErr, wr.ID, want)
	}
	return nil
}

// pollCQ waits up to WaitLimit for one completion.
func pollCQ(ctx context.Context, cq *verbs.CQ) (verbs.WorkCompletion, error) {
	deadline := time.Now().Add(WaitLimit)
	var wc [1]verbs.WorkCompletion
	for cq.Poll(wc[:]) == 0 {
		if time.Now().After(deadline) {
			return wc[0], fmt.Errorf("no completion within %v", WaitLimit)
		}
		if ctx.Err() != nil {
			return wc[0], ctx.Err()
		}
		time.Sleep(200 * time.Microsecond)
	}
	return wc[0], nil
}

// dump asks verbs_peer for its buffer bytes at [off, off+n).
func (r *Cell) dump(ctx context.Context, off, n int) ([]byte, error) {
	ev, err := r.Peer.op(ctx, fmt.Sprintf("dump:off=%d,len=%d", off, n), "the dump", isEvent("data"))
	if err != nil {
		return nil, err
	}
	b, err := hex.DecodeString(ev.Hex)
	switch {
	case err != nil:
		return nil, fmt.Errorf("dump: bad hex: %w", err)
	case ev.Off != off || len(b) != n:
		return nil, fmt.Errorf("dump: got %d bytes at %d, want %d at %d", len(b), ev.Off, n, off)
	case crc32.ChecksumIEEE(b) != ev.CRC32:
		return nil, fmt.Errorf("dump: crc32 %#08x of the hex, verbs_peer says %#08x", crc32.ChecksumIEEE(b), ev.CRC32)
	}
	return b, nil
}

// peerRecv asks verbs_peer to poll one receive completion and checks it.
func (r *Cell) peerRecv(ctx context.Context, opcode string, n int, imm *uint32, data []byte) error {
	ev, err := r.Peer.op(ctx, "poll:n=1", "a receive completion", isWC("recv"))
	if err != nil {
		return err
	}
	var p []string
	if ev.Status != "success" || ev.Opcode != opcode || ev.ByteLen != uint32(n) {
		p = append(p, fmt.Sprintf("completion %s %s byte_len %d, want success %s %d", ev.Status, ev.Opcode, ev.ByteLen, opcode, n))
	}
	switch {
	case imm == nil && ev.ImmData != nil:
		p = append(p, fmt.Sprintf("unexpected imm_data %#x", *ev.ImmData))
	case imm != nil && ev.ImmData == nil:
		p = append(p, fmt.Sprintf("no imm_data, want %#x", *imm))
	case imm != nil && *ev.ImmData != *imm:
		p = append(p, fmt.Sprintf("imm_data %#x, want %#x", *ev.ImmData, *imm))
	}
	if data != nil {
		p = append(p, crcProblems(ev, data)...)
	}
	if len(p) > 0 {
		return errors.New(strings.Join(p, "; "))
	}
	return nil
}

// crcProblems compares a completion's data_crc32/data_head (zlib.crc32, the
// IEEE CRC-32, and the first 32 bytes in hex) with data.
func crcProblems(ev PeerEvent, data []byte) []string {
	var p []string
	if ev.DataCRC32 == nil {
		return []string{"no data_crc32"}
	}
	if ev.DataLen != nil && *ev.DataLen != len(data) {
		p = append(p, fmt.Sprintf("data_len %d, want %d", *ev.DataLen, len(data)))
	}
	if want := crc32.ChecksumIEEE(data); *ev.DataCRC32 != want {
		p = append(p, fmt.Sprintf("data_crc32 %#08x, want %#08x", *ev.DataCRC32, want))
	}
	if want := hex.EncodeToString(data[:min(32, len(data))]); ev.DataHead != want {
		p = append(p, fmt.Sprintf("data_head %s, want %s", ev.DataHead, want))
	}
	return p
}

// toPeer runs every RC operation from xdproce to verbs_peer.
func (r *Cell) toPeer(ctx context.Context) error {
	raddr := func(off int) uint64 { return r.remote.Addr + uint64(off) }
	rkey := r.remote.RKey

	// RDMA WRITE, checked with a dump of verbs_peer's memory.
	name := fmt.Sprintf("xdproce→rxe RDMA WRITE %d B at roff %d", BigLen, pWrite)
	if err := r.post(ctx, name, verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: r.sge(oSrc, BigLen),
		RemoteAddr: raddr(pWrite), RKey: rkey}, verbs.WCRDMAWrite); err != nil {
		return err
	}
	copy(r.wantPeer[pWrite:], r.ours[oSrc:oSrc+BigLen])
	got, err := r.dump(ctx, pWrite, BigLen)
	if err != nil {
		return err
	}
	r.record(name, DiffBytes(got, r.ours[oSrc:oSrc+BigLen]))

	// RDMA READ of verbs_peer's pattern.
	name = fmt.Sprintf("xdproce→rxe RDMA READ %d B at roff %d", BigLen, pRead)
	if err := r.post(ctx, name, verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: r.sge(oReadTo, BigLen),
		RemoteAddr: raddr(pRead), RKey: rkey}, verbs.WCRDMARead); err != nil {
		return err
	}
	copy(r.wantOurs[oReadTo:], r.wantPeer[pRead:pRead+BigLen])
	r.record(name, DiffBytes(r.ours[oReadTo:oReadTo+BigLen], r.wantPeer[pRead:pRead+BigLen]))

	// SEND into one of verbs_peer's receives: it reports the CRC-32.
	const sendOff = oSrc + 11
	name = fmt.Sprintf("xdproce→rxe SEND %d B", sendLen)
	if err := r.post(ctx, name, verbs.SendWR{Opcode: verbs.WRSend, SGList: r.sge(sendOff, sendLen)}, verbs.WCSend); err != nil {
		return err
	}
	r.record(name, r.peerRecv(ctx, "RECV", sendLen, nil, r.ours[sendOff:sendOff+sendLen]))

	// RDMA WRITE with immediate: a receive completion with the immediate,
	// and the bytes in verbs_peer's memory.
	const wimmOff, wimm = oSrc + 5, uint32(0xa1b2c3d4)
	name = fmt.Sprintf("xdproce→rxe RDMA WRITE_WITH_IMM %d B at roff %d imm %#x", immWriteLen, pWriteImm, wimm)
	if err := r.post(ctx, name, verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, SGList: r.sge(wimmOff, immWriteLen),
		RemoteAddr: raddr(pWriteImm), RKey: rkey, ImmData: wimm}, verbs.WCRDMAWrite); err != nil {
		return err
	}
	copy(r.wantPeer[pWriteImm:], r.ours[wimmOff:wimmOff+immWriteLen])
	err = r.peerRecv(ctx, "RECV_RDMA_WITH_IMM", immWriteLen, ptr(wimm), nil)
	if err == nil {
		got, derr := r.dump(ctx, pWriteImm, immWriteLen)
		if derr != nil {
			return derr
		}
		err = DiffBytes(got, r.ours[wimmOff:wimmOff+immWriteLen])
	}
	r.record(name, err)

	// SEND with immediate.
	const simmOff, simm = oSrc + 333, uint32(0x0badf00d)
	name = fmt.Sprintf("xdproce→rxe SEND_WITH_IMM %d B imm %#x", immSendLen, simm)
	if err := r.post(ctx, name, verbs.SendWR{Opcode: verbs.WRSendWithImm, SGList: r.sge(simmOff, immSendLen),
		ImmData: simm}, verbs.WCSend); err != nil {
		return err
	}
	r.record(name, r.peerRecv(ctx, "RECV", immSendLen, ptr(simm), r.ours[simmOff:simmOff+immSendLen]))

	// Atomics on verbs_peer's pattern: CAS that swaps, CAS that misses,
	// FETCH_ADD; then a READ of the words and a guard word either side.
	orig0, orig8 := le64(r.wantPeer[PAtomic:]), le64(r.wantPeer[PAtomic+8:])
	const swap, missSwap, add = uint64(0x1122334455667788), uint64(0xdeadbeefcafef00d), uint64(0x0102030405060708)
	atomics := []struct {
		name     string
		wr       verbs.SendWR
		opcode   verbs.WCOpcode
		wantOrig uint64
	}{
		{fmt.Sprintf("xdproce→rxe CMP_AND_SWAP at roff %d (hit)", PAtomic),
			verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, RemoteAddr: raddr(PAtomic), CompareAdd: orig0, Swap: swap}, verbs.WCCompSwap, orig0},
		{fmt.Sprintf("xdproce→rxe CMP_AND_SWAP at roff %d (miss)", PAtomic),
			verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, RemoteAddr: raddr(PAtomic), CompareAdd: orig0, Swap: missSwap}, verbs.WCCompSwap, swap},
		{fmt.Sprintf("xdproce→rxe FETCH_AND_ADD at roff %d", PAtomic+8),
			verbs.SendWR{Opcode: verbs.WRAtomicFetchAdd, RemoteAddr: raddr(PAtomic + 8), CompareAdd: add}, verbs.WCFetchAdd, orig8},
	}
	for i, a := range atomics {
		a.wr.RKey, a.wr.SGList = rkey, r.sge(OAtomicTo+8*i, 8)
		if err := r.post(ctx, a.name, a.wr, a.opcode); err != nil {
			return err
		}
		putLE64(r.wantOurs[OAtomicTo+8*i:], a.wantOrig)
		var err error
		if got := le64(r.ours[OAtomicTo+8*i:]); got != a.wantOrig {
			err = fmt.Errorf("returned original %#016x, want %#016x", got, a.wantOrig)
		}
		r.record(a.name+" returns the original", err)
	}
	putLE64(r.wantPeer[PAtomic:], swap)
	putLE64(r.wantPeer[PAtomic+8:], orig8+add)
	const atRead = oReadTo + BigLen + 64
	name = fmt.Sprintf("xdproce→rxe RDMA READ after the atomics: %#x and %#x at roff %d", swap, orig8+add, PAtomic)
	if err := r.post(ctx, name, verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: r.sge(atRead, 32),
		RemoteAddr: raddr(PAtomic - 8), RKey: rkey}, verbs.WCRDMARead); err != nil {
		return err
	}
	copy(r.wantOurs[atRead:], r.wantPeer[PAtomic-8:PAtomic+24])
	r.record(name, DiffBytes(r.ours[atRead:atRead+32], r.wantPeer[PAtomic-8:PAtomic+24]))
	return nil
}

func ptr[T any](v T) *T { return &v }

// peerSend runs one of verbs_peer's send-queue OPs and checks that it
// completed successfully with the expected verb.
func (r *Cell) peerSend(ctx context.Context, line, verb string) (PeerEvent, error) {
	ev, err := r.Peer.op(ctx, line, "a send completion", isWC("send"))
	if err != nil {
		return ev, err
	}
	if ev.Status != "success" || ev.Op != verb {
		return ev, fmt.Errorf("verbs_peer %s: completion %s for %s, want success for %s", line, ev.Status, ev.Op, verb)
	}
	return ev, nil
}

// ourRecv waits for one of our receive completions and checks it and the
// bytes in its buffer.
func (r *Cell) ourRecv(ctx context.Context, opcode verbs.WCOpcode, n int, imm *uint32, data []byte) error {
	wc, err := pollCQ(ctx, r.rcq)
	if err != nil {
		return fmt.Errorf("our receive: %w", err)
	}
	if wc.Status != verbs.WCSuccess || wc.WRID >= recvSlots {
		return fmt.Errorf("our receive completion wr_id %d %v", wc.WRID, wc.Status)
	}
	var p []string
	if wc.Opcode != opcode || wc.ByteLen != uint32(n) {
		p = append(p, fmt.Sprintf("opcode %d byte_len %d, want %d %d", wc.Opcode, wc.ByteLen, opcode, n))
	}
	switch hasImm := wc.Flags&verbs.WCWithImm != 0; {
	case imm == nil && hasImm:
		p = append(p, fmt.Sprintf("unexpected immediate %#x", wc.ImmData))
	case imm != nil && !hasImm:
		p = append(p, fmt.Sprintf("no immediate, want %#x", *imm))
	case imm != nil && wc.ImmData != *imm:
		p = append(p, fmt.Sprintf("immediate %#x, want %#x", wc.ImmData, *imm))
	}
	if data != nil {
		off := oRecv + int(wc.WRID)*recvSlotLen
		copy(r.wantOurs[off:], data)
		if err := DiffBytes(r.ours[off:off+len(data)], data); err != nil {
			p = append(p, "received bytes: "+err.Error())
		}
	}
	if len(p) > 0 {
		return errors.New(strings.Join(p, "; "))
	}
	return nil
}

// fromPeer runs every RC operation from verbs_peer to xdproce.
func (r *Cell) fromPeer(ctx context.Context) error {
	src := func(off, n int) []byte { return r.wantPeer[pSrc+off : pSrc+off+n] }

	name := fmt.Sprintf("rxe→xdproce RDMA WRITE %d B at roff %d", BigLen, oPeerWrite)
	if _, err := r.peerSend(ctx, fmt.Sprintf("write:len=%d,off=%d,roff=%d", BigLen, pSrc, oPeerWrite), "RDMA_WRITE"); err != nil {
		return err
	}
	copy(r.wantOurs[oPeerWrite:], src(0, BigLen))
	r.record(name, DiffBytes(r.ours[oPeerWrite:oPeerWrite+BigLen], src(0, BigLen)))

	name = fmt.Sprintf("rxe→xdproce RDMA READ %d B at roff %d", BigLen, oPeerRead)
	ev, err := r.peerSend(ctx, fmt.Sprintf("read:len=%d,off=%d,roff=%d", BigLen, pReadTo, oPeerRead), "RDMA_READ")
	if err != nil {
		return err
	}
	copy(r.wantPeer[pReadTo:], r.wantOurs[oPeerRead:oPeerRead+BigLen])
	if p := crcProblems(ev, r.wantOurs[oPeerRead:oPeerRead+BigLen]); len(p) > 0 {
		r.record(name, errors.New(strings.Join(p, "; ")))
	} else {
		r.record(name, nil)
	}

	name = fmt.Sprintf("rxe→xdproce SEND %d B", sendLen)
	if _, err := r.peerSend(ctx, fmt.Sprintf("send:len=%d,off=%d", sendLen, pSrc+17), "SEND"); err != nil {
		return err
	}
	r.record(name, r.ourRecv(ctx, verbs.WCRecv, sendLen, nil, src(17, sendLen)))

	const simm = uint32(0x5eed1234)
	name = fmt.Sprintf("rxe→xdproce SEND_WITH_IMM %d B imm %#x", immSendLen, simm)
	if _, err := r.peerSend(ctx, fmt.Sprintf("send_imm:len=%d,off=%d,imm=%#x", immSendLen, pSrc+29, simm), "SEND_WITH_IMM"); err != nil {
		return err
	}
	r.record(name, r.ourRecv(ctx, verbs.WCRecv, immSendLen, ptr(simm), src(29, immSendLen)))

	const wimm = uint32(0xfeedc0de)
	name = fmt.Sprintf("rxe→xdproce RDMA WRITE_WITH_IMM %d B at roff %d imm %#x", immWriteLen, oPeerWriteImm, wimm)
	if _, err := r.peerSend(ctx, fmt.Sprintf("write_imm:len=%d,off=%d,roff=%d,imm=%#x", immWriteLen, pSrc+3, oPeerWriteImm, wimm), "RDMA_WRITE_WITH_IMM"); err != nil {
		return err
	}
	copy(r.wantOurs[oPeerWriteImm:], src(3, immWriteLen))
	err = r.ourRecv(ctx, verbs.WCRecvRDMAWithImm, immWriteLen, ptr(wimm), nil)
	if err == nil {
		err = DiffBytes(r.ours[oPeerWriteImm:oPeerWriteImm+immWriteLen], src(3, immWriteLen))
	}
	r.record(name, err)

	// Atomics on our pattern; verbs_peer reports the original value ("orig",
	// the 8 bytes it got back, little-endian).
	orig0, orig8 := le64(r.wantOurs[OPeerAtomic:]), le64(r.wantOurs[OPeerAtomic+8:])
	const swap, missSwap, add = uint64(0x8877665544332211), uint64(0x0123456789abcdef), uint64(0x1000000000000001)
	atomics := []struct {
		name, line, verb string
		wantOrig         uint64
	}{
		{fmt.Sprintf("rxe→xdproce CMP_AND_SWAP at roff %d (hit)", OPeerAtomic),
			fmt.Sprintf("cas:roff=%d,off=%d,compare=%#x,swap=%#x", OPeerAtomic, PAtomicTo, orig0, swap), "ATOMIC_CMP_AND_SWP", orig0},
		{fmt.Sprintf("rxe→xdproce CMP_AND_SWAP at roff %d (miss)", OPeerAtomic),
			fmt.Sprintf("cas:roff=%d,off=%d,compare=%#x,swap=%#x", OPeerAtomic, PAtomicTo+8, orig0, missSwap), "ATOMIC_CMP_AND_SWP", swap},
		{fmt.Sprintf("rxe→xdproce FETCH_AND_ADD at roff %d", OPeerAtomic+8),
			fmt.Sprintf("faa:roff=%d,off=%d,add=%#x", OPeerAtomic+8, PAtomicTo+16, add), "ATOMIC_FETCH_AND_ADD", orig8},
	}
	for i, a := range atomics {
		ev, err := r.peerSend(ctx, a.line, a.verb)
		if err != nil {
			return err
		}
		putLE64(r.wantPeer[PAtomicTo+8*i:], a.wantOrig)
		switch {
		case ev.Orig == nil:
			err = errors.New("no orig in the completion")
		case *ev.Orig != a.wantOrig:
			err = fmt.Errorf("orig %#016x, want %#016x", *ev.Orig, a.wantOrig)
		}
		r.record(a.name+" returns the original", err)
	}
	putLE64(r.wantOurs[OPeerAtomic:], swap)
	putLE64(r.wantOurs[OPeerAtomic+8:], orig8+add)
	r.record(fmt.Sprintf("rxe→xdproce atomics leave %#x and %#x at roff %d", swap, orig8+add, OPeerAtomic),
		DiffBytes(r.ours[OPeerAtomic-8:OPeerAtomic+24], r.wantOurs[OPeerAtomic-8:OPeerAtomic+24]))
	return nil
}

// final compares both whole buffers with the models and ends verbs_peer,
// which must report no failed completion.
func (r *Cell) final(ctx context.Context) error {
	r.record("our whole 1 MiB buffer matches the model (no stray writes)", DiffBytes(r.ours, r.wantOurs))
	got, err := r.dump(ctx, 0, BufSize)
	if err != nil {
		return err
	}
	r.record("verbs_peer's whole 1 MiB buffer matches the model (no stray writes)", DiffBytes(got, r.wantPeer))
	if err := r.Peer.in.Close(); err != nil {
		return fmt.Errorf("close verbs_peer's stdin: %w", err)
	}
	ev, err := r.Peer.await(ctx, `"done"`, isEvent("done"))
	if err != nil {
		return err
	}
	if ev.Failures != 0 || ev.OK == nil || !*ev.OK {
		r.record("verbs_peer ends without failures", fmt.Errorf("done: %d failures", ev.Failures))
	} else {
		r.record("verbs_peer ends without failures", nil)
	}
	return nil
}

// OpenDeviceIn opens an xdproce device on ifname inside the named network
// namespace (internal/nsenter). The device's sockets and XDP program belong
// to the namespace for good.
func OpenDeviceIn(ctx context.Context, ns, ifname string) (*verbs.Device, error) {
	target, err := vnetns.GetFromPath(filepath.Join("/run/netns", ns))
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", ns, err)
	}
	defer target.Close()
	var dev *verbs.Device
	err = nsenter.Do(target, func() (err error) {
		dev, err = verbs.Open(ctx, ifname, verbs.Options{Logger: slog.New(slog.DiscardHandler)})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open xdproce on %s in netns %s: %w", ifname, ns, err)
	}
	return dev, nil
}

// peerProc is verbs_peer running in a VM through "rxe-peer exec" (ssh),
// with its stdin and stdout piped to us.
type peerProc struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	Stderr proc.TailBuffer
	Stream *PeerStream
	done   chan struct{}
	err    error // valid once done is closed
}

// StartPeerProc runs shell in VM vm with script, rxe-peer's command.
func StartPeerProc(ctx context.Context, script string, vm int, shell string, timeout time.Duration, logf func(string, ...any)) (*peerProc, error) {
	pp := &peerProc{done: make(chan struct{})}
	var cctx context.Context
	cctx, pp.cancel = context.WithTimeout(ctx, timeout+30*time.Second)
	args := []string{"exec", "-T", strconv.Itoa(int(timeout.Seconds())), strconv.Itoa(vm), shell}
	logf("$ %s %s", script, proc.ShellJoin(args))
	pp.cmd = proc.Command(cctx, &pp.Stderr, script, args...)
	stdin, err := pp.cmd.StdinPipe()
	if err != nil {
		pp.cancel()
		return nil, err
	}
	pr, pw := io.Pipe()
	pp.cmd.Stdout = pw
	if err := pp.cmd.Start(); err != nil {
		pp.cancel()
		return nil, fmt.Errorf("start rxe-peer exec: %w", err)
	}
	pp.Stream = NewPeerStream(stdin, pr, logf)
	go func() {
		pp.err = proc.Error(cctx, timeout+30*time.Second, pp.cmd.Wait())
		pw.Close()
		close(pp.done)
	}()
	return pp, nil
}

// Stop closes verbs_peer's stdin (it then ends by itself), waits up to grace,
// then kills the process group; it returns the transcript and stderr.
func (pp *peerProc) Stop(grace time.Duration) (string, error) {
	pp.Stream.in.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-pp.done:
	case <-t.C:
		pp.cancel()
		<-pp.done // bounded by WaitDelay
	}
	pp.cancel()
	out := pp.Stream.trace.String()
	if s := strings.TrimSpace(pp.Stderr.String()); s != "" {
		out += "stderr:\n" + s + "\n"
	}
	return out, pp.err
}
