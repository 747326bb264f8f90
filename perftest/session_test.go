package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/pcap"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/verbs"
)

// memPair is two xdproce devices joined by an in-memory link.
type memPair struct {
	a, b   *verbs.Device
	la, lb *memlink.Link
}

func newMemPair(t *testing.T) memPair {
	t.Helper()
	macA, macB := net.HardwareAddr{2, 0, 0, 0, 0, 1}, net.HardwareAddr{2, 0, 0, 0, 0, 2}
	ipA, ipB := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	la, lb := memlink.NewPair(4096 + 200)
	open := func(l link.Link, mac, peerMAC net.HardwareAddr, ip netip.Addr) *verbs.Device {
		d, err := verbs.NewDevice(l, verbs.DeviceConfig{MAC: mac, ActiveMTU: 4096,
			GIDs:    []netip.Addr{netip.MustParseAddr("fe80::1"), ip},
			Resolve: func(context.Context, netip.Addr) (net.HardwareAddr, error) { return peerMAC, nil }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	return memPair{a: open(la, macA, macB, ipA), b: open(lb, macB, macA, ipB), la: la, lb: lb}
}

// transcript records the sizes of the messages one side writes on the
// out-of-band channel.
type transcript struct {
	mu     sync.Mutex
	writes []int
	first  [][]byte // the first four messages: versions, sys data, MTU
}

type recordingConn struct {
	net.Conn
	t *transcript
}

func (c recordingConn) Write(b []byte) (int, error) {
	c.t.mu.Lock()
	c.t.writes = append(c.t.writes, len(b))
	if len(c.t.first) < 4 {
		c.t.first = append(c.t.first, bytes.Clone(b))
	}
	c.t.mu.Unlock()
	return c.Conn.Write(b)
}

func (t *transcript) wrap(c net.Conn) net.Conn { return recordingConn{c, t} }

// runPair runs cfg's tool with the server on p.b and the client on p.a,
// over loopback TCP, and returns both sides' results, reports and
// transcripts.
func runPair(t *testing.T, p memPair, cfg Config) (client, server []Result, cout, sout string, ct, st *transcript) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg.Port, cfg.Bind, cfg.Timeout = port, "127.0.0.1", 30*time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ct, st = &transcript{}, &transcript{}
	var cbuf, sbuf bytes.Buffer
	var serr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		server, serr = run(ctx, &session{cfg: cfg, dev: p.b, out: &sbuf, wrap: st.wrap})
	}()
	ccfg := cfg
	ccfg.Server = "127.0.0.1"
	client, cerr := run(ctx, &session{cfg: ccfg, dev: p.a, out: &cbuf, wrap: ct.wrap})
	if cerr != nil {
		cancel()
	}
	<-done
	if cerr != nil || serr != nil {
		t.Fatalf("%v: client: %v\nserver: %v\nclient output:\n%s\nserver output:\n%s", cfg.Tool, cerr, serr, &cbuf, &sbuf)
	}
	return client, server, cbuf.String(), sbuf.String(), ct, st
}

// goldenRecords reads one of rxe-peer's golden captures.
func goldenRecords(t *testing.T, name string) []pcap.Record {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "wire", "testdata", "pcaps", name))
	if err != nil {
		t.Fatal(err)
	}
	_, recs, err := pcap.ReadAll(data)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// goldenExchange reads the out-of-band messages of a capture of two stock
// perftests (rxe-peer's golden pcaps): the sizes each side wrote, in order.
func goldenExchange(t *testing.T, name string) (client, server []int) {
	t.Helper()
	recs := goldenRecords(t, name)
	for _, r := range recs {
		f := r.Data
		if len(f) < 14+20 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[14+9] != 6 {
			continue
		}
		ip := f[14:]
		tcp := ip[int(ip[0]&0xf)*4:]
		payload := tcp[int(tcp[12]>>4)*4 : binary.BigEndian.Uint16(ip[2:])-uint16(ip[0]&0xf)*4]
		if len(payload) == 0 {
			continue
		}
		switch DefaultPort {
		case int(binary.BigEndian.Uint16(tcp[2:])):
			client = append(client, len(payload))
		case int(binary.BigEndian.Uint16(tcp[0:])):
			server = append(server, len(payload))
		}
	}
	return client, server
}

// The golden captures were made with -n 5 and these sizes.
var goldenRuns = []struct {
	pcap string
	cfg  Config
}{
	{"rc_send_multi.pcap", Config{Tool: Tool{Send, BW}, Iters: 5, Size: 10001}},
	{"rc_send_lat.pcap", Config{Tool: Tool{Send, Lat}, Iters: 5, Size: 64}},
	{"rc_write_multi.pcap", Config{Tool: Tool{Write, BW}, Iters: 5, Size: 16384}},
	{"rc_write_lat.pcap", Config{Tool: Tool{Write, Lat}, Iters: 5, Size: 32}},
	{"rc_read_multi.pcap", Config{Tool: Tool{Read, BW}, Iters: 5, Size: 12288}},
	{"rc_read_only.pcap", Config{Tool: Tool{Read, Lat}, Iters: 5, Size: 64}},
	{"rc_atomic_fa.pcap", Config{Tool: Tool{Atomic, BW}, Iters: 5, Atomic: FetchAndAdd}},
	{"rc_atomic_cs.pcap", Config{Tool: Tool{Atomic, Lat}, Iters: 5, Atomic: CmpAndSwap}},
}

// Each tool's out-of-band exchange must be stock perftest's, message for
// message: a peer counts the hand shakes, and one too many or too few
// hangs both sides. The reference is the TCP stream of real perftest 4.5
// in the rxe-peer captures.
func TestExchangeMatchesStockPerftest(t *testing.T) {
	for _, g := range goldenRuns {
		t.Run(g.cfg.Tool.String(), func(t *testing.T) {
			wantC, wantS := goldenExchange(t, g.pcap)
			if len(wantC) < 8 {
				t.Fatalf("%s: only %d client messages", g.pcap, len(wantC))
			}
			p := newMemPair(t)
			cfg := g.cfg
			cfg.GIDIndex = -1
			_, _, cout, sout, ct, st := runPair(t, p, cfg)
			if fmt.Sprint(ct.writes) != fmt.Sprint(wantC) {
				t.Errorf("client wrote %v\nstock perftest %v\noutput:\n%s", ct.writes, wantC, cout)
			}
			if fmt.Sprint(st.writes) != fmt.Sprint(wantS) {
				t.Errorf("server wrote %v\nstock perftest %v\noutput:\n%s", st.writes, wantS, sout)
			}
			// versions, cycle buffer, cache line, MTU: byte for byte.
			want := [][]byte{append([]byte("6.06"), make([]byte, 12)...), {0, 0, 0x10, 0}, {0, 0, 0, 64}, {'5', 0}}
			for i, w := range want {
				if !bytes.Equal(ct.first[i], w) || !bytes.Equal(st.first[i], w) {
					t.Errorf("message %d: client %q server %q, want %q", i, ct.first[i], st.first[i], w)
				}
			}
		})
	}
}

// Every tool runs between two xdproce devices with Verify, which checks
// every byte (or atomic result) that arrives, at path MTU 1024 so that
// messages span packets.
func TestToolsVerify(t *testing.T) {
	for _, tool := range Tools() {
		t.Run(tool.String(), func(t *testing.T) {
			p := newMemPair(t)
			cfg := Config{Tool: tool, Iters: 200, Verify: true, MTU: 1024, GIDIndex: -1, ReportGbits: true}
			if tool.Verb != Atomic {
				cfg.Size = 3000
			}
			client, server, cout, sout, _, _ := runPair(t, p, cfg)
			if len(client) != 1 || client[0].Iters != 200 {
				t.Fatalf("client results %+v\n%s", client, cout)
			}
			if tool.Test == BW && client[0].AvgBps <= 0 {
				t.Errorf("client bandwidth %v", client[0].AvgBps)
			}
			if tool.Test == Lat && client[0].Typical <= 0 {
				t.Errorf("client latency %+v", client[0])
			}
			// The server prints the figures of a bandwidth test too: its
			// own for SEND, the client's for the others.
			if tool.Test == BW && (len(server) != 1 || server[0].AvgBps <= 0 || server[0].Iters != 200) {
				t.Errorf("server results %+v\n%s", server, sout)
			}
			row := " 3000 "
			if tool.Verb == Atomic {
				row = " 8 "
			}
			if !strings.Contains(cout, row) {
				t.Errorf("client output has no %q row:\n%s", row, cout)
			}
		})
	}
}

// Verify notices corruption: the link flips bits, the ICRC catches most,
// but a flipped byte in memory must fail the run.
func TestVerifyDetectsWrongData(t *testing.T) {
	p := newMemPair(t)
	s := &session{cfg: Config{Tool: Tool{Write, BW}, QPs: 1, Iters: 10, Size: 100, Verify: true}}
	s.cycle, s.line, s.slot = cycleBuffer, cacheLine, cycleBuffer
	pd, err := p.a.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if s.mr, err = pd.AllocMR(2*s.slot, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	s.out = &bytes.Buffer{}
	s.fill()
	dst := s.mr.Bytes()[s.slot:]
	for _, o := range s.positions(100, 10) {
		copyPattern(dst[o:o+100], o)
	}
	if err := s.verifyTarget(); err != nil {
		t.Fatalf("intact target: %v", err)
	}
	dst[64*3+17] ^= 0x40
	if err := s.verifyTarget(); err == nil {
		t.Fatal("a flipped byte passed verification")
	}
}

// ib_write_bw -a runs every size from 2 B to 8 MiB on one connection.
func TestAllSizes(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 46 MiB through the in-memory link")
	}
	p := newMemPair(t)
	client, server, cout, _, _, _ := runPair(t, p, Config{Tool: Tool{Write, BW}, Iters: 5, AllSizes: true, Verify: true, GIDIndex: -1})
	if len(client) != 23 || client[0].Size != 2 || client[22].Size != 1<<23 {
		t.Fatalf("sizes %+v\n%s", client, cout)
	}
	if len(server) != 1 || server[0].Size != 1<<23 {
		t.Errorf("server got report %+v, want the last size's", server)
	}
}

// A run in duration mode reports the iterations of its sampled window.
func TestDuration(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	for _, tool := range []Tool{{Send, BW}, {Write, Lat}} {
		t.Run(tool.String(), func(t *testing.T) {
			p := newMemPair(t)
			client, _, cout, _, _, _ := runPair(t, p, Config{Tool: tool, Duration: time.Second, Size: 64, GIDIndex: -1})
			if len(client) != 1 || client[0].Iters == 0 {
				t.Fatalf("results %+v\n%s", client, cout)
			}
		})
	}
}

// Loss on the link is the transport's business: perftest's QPs retry
// forever (retry_cnt 7), so a run completes with every byte intact.
func TestToolsUnderLoss(t *testing.T) {
	for _, tool := range []Tool{{Write, BW}, {Send, BW}, {Read, BW}, {Send, Lat}} {
		t.Run(tool.String(), func(t *testing.T) {
			p := newMemPair(t)
			imp := memlink.Impairment{Drop: 0.02, Duplicate: 0.01, Reorder: 0.01, Seed: 7}
			p.la.SetImpairment(imp)
			imp.Seed = 8
			p.lb.SetImpairment(imp)
			client, _, cout, _, _, _ := runPair(t, p, Config{Tool: tool, Iters: 300, Size: 5000, MTU: 1024, Verify: true, GIDIndex: -1})
			if len(client) != 1 || client[0].Iters != 300 {
				t.Fatalf("results %+v\n%s", client, cout)
			}
			if p.la.Stats().Dropped == 0 && p.lb.Stats().Dropped == 0 {
				t.Error("the link dropped nothing")
			}
		})
	}
}

func TestCHexIsCsHashFormat(t *testing.T) {
	// What perftest printed for the same values (rxe-peer's baseline).
	for _, c := range []struct {
		v     uint64
		width int
		want  string
	}{{0, 4, "0000"}, {0x17, 6, "0x0017"}, {0xbdbe2e, 6, "0xbdbe2e"}, {0x8ac, 8, "0x0008ac"}, {0x7fc179c42000, 16, "0x007fc179c42000"}} {
		if got := cHex(c.v, c.width); got != c.want {
			t.Errorf("cHex(%#x, %d) = %q, want %q", c.v, c.width, got, c.want)
		}
	}
}

// ibv_rc_pingpong's address message round-trips, as rdma-core formats it.
func TestPingPongDest(t *testing.T) {
	d := pingPongDest{QPN: 0x11, PSN: 0xabcdef, GID: netip.MustParseAddr("::ffff:198.18.0.11").As16()}
	b := d.marshal()
	if want := "0000:000011:abcdef:00000000000000000000ffffc612000b\x00"; string(b) != want {
		t.Fatalf("marshal = %q, want %q", b, want)
	}
	if got, err := parsePingPongDest(b); err != nil || got != d {
		t.Fatalf("parse = %+v, %v", got, err)
	}
	if _, err := parsePingPongDest([]byte("0000:0000xx:abcdef:00000000000000000000ffffc612000b\x00")); err == nil {
		t.Error("a malformed QPN parsed")
	}
}

// Two xdproce devices play ibv_rc_pingpong with each other.
func TestPingPong(t *testing.T) {
	p := newMemPair(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := PingPongConfig{Bind: "127.0.0.1", Port: port, Iters: 200, Size: 9000, GIDIndex: 1, Validate: true, Timeout: 30 * time.Second}
	errc := make(chan error, 1)
	var sout bytes.Buffer
	go func(cfg PingPongConfig) { errc <- RunPingPong(t.Context(), p.b, cfg, &sout) }(cfg)
	cfg.Server = "127.0.0.1"
	var cout bytes.Buffer
	cerr := RunPingPong(t.Context(), p.a, cfg, &cout)
	if err := <-errc; err != nil || cerr != nil {
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, &cout, err, &sout)
	}
	if !strings.Contains(cout.String(), "200 iters in") || !strings.Contains(sout.String(), "3600000 bytes in") {
		t.Errorf("reports:\n%s\n%s", &cout, &sout)
	}
}

// perftest's QPs retry forever, so a peer that stops answering shows only
// as completions that stop coming: the client gives up after Timeout
// instead of hanging, and the server's channel then ends too.
func TestDeadPeerTimesOut(t *testing.T) {
	p := newMemPair(t)
	p.la.SetImpairment(memlink.Impairment{Drop: 1}) // nothing the client sends arrives
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := Config{Tool: Tool{Write, BW}, Iters: 50, Size: 4096, GIDIndex: -1, Port: port, Bind: "127.0.0.1", Timeout: 2 * time.Second}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	serr := make(chan error, 1)
	go func(cfg Config) {
		_, err := Run(ctx, p.b, cfg, io.Discard)
		serr <- err
	}(cfg)
	cfg.Server = "127.0.0.1"
	start := time.Now()
	_, cerr := Run(ctx, p.a, cfg, io.Discard)
	if cerr == nil || !strings.Contains(cerr.Error(), "no completion") {
		t.Fatalf("client: %v, want a timeout for the missing completions", cerr)
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Errorf("the client gave up after %v", el)
	}
	if err := <-serr; err == nil {
		t.Error("the server succeeded against a client that failed")
	}
}

// With Verify, no two UD receives posted at once share memory: a datagram
// arriving while an earlier one waits for its check would tear it. Without
// Verify the receives share positions, as perftest's do.
func TestUDVerifyReceivesOwnRegions(t *testing.T) {
	for _, verify := range []bool{true, false} {
		s := &session{cfg: Config{Tool: Tool{Send, BW}, Conn: UD, QPs: 1, RxDepth: 300, Size: 1024, Verify: verify}}
		s.cycle, s.line = cycleBuffer, cacheLine
		s.slot = s.slotBytes()
		s.qps = make([]*verbs.QP, 1)
		r := s.newReceiver(1024)
		used := make([]bool, s.slot)
		overlap := false
		// Any RxDepth receives in a row are outstanding together.
		for n := uint64(1000); n < 1000+uint64(s.cfg.RxDepth); n++ {
			off := s.recvOffset(r, n)
			if off+r.length > s.slot {
				t.Fatalf("verify %v: receive %d at %d+%d leaves the %d-byte slot", verify, n, off, r.length, s.slot)
			}
			for i := off; i < off+r.length; i++ {
				overlap = overlap || used[i]
				used[i] = true
			}
		}
		if overlap == verify {
			t.Errorf("verify %v: receives outstanding together overlap: %v", verify, overlap)
		}
	}
}

// Only the server of WRITE bandwidth and of READ and atomic tests leaves its
// device alone during the run, as perftest's does.
func TestPassive(t *testing.T) {
	for _, tc := range []struct {
		tool   Tool
		server bool
		want   bool
	}{
		{Tool{Write, BW}, true, true}, {Tool{Write, BW}, false, false},
		{Tool{Write, Lat}, true, false}, {Tool{Read, BW}, true, true}, {Tool{Read, Lat}, true, true},
		{Tool{Atomic, BW}, true, true}, {Tool{Atomic, Lat}, true, true}, {Tool{Read, Lat}, false, false},
		{Tool{Send, BW}, true, false}, {Tool{Send, Lat}, true, false},
	} {
		c := Config{Tool: tc.tool}
		if !tc.server {
			c.Server = "198.18.0.2"
		}
		if got := c.Passive(); got != tc.want {
			t.Errorf("%v server %v: passive %v, want %v", tc.tool, tc.server, got, tc.want)
		}
	}
}

// TestDeviceMemory: with Config.DeviceMemory both sides' buffers are
// device memory (regions over it are zero-based), and every tool moves
// its bytes there intact.
func TestDeviceMemory(t *testing.T) {
	for _, name := range []string{"ib_write_bw", "ib_write_lat", "ib_read_bw", "ib_send_lat"} {
		t.Run(name, func(t *testing.T) {
			tool, err := ParseTool(name)
			if err != nil {
				t.Fatal(err)
			}
			p := newMemPair(t)
			cfg := Config{Tool: tool, Iters: 100, Size: 3000, Verify: true, MTU: 1024, GIDIndex: -1, DeviceMemory: true}
			client, _, cout, sout, _, _ := runPair(t, p, cfg)
			if len(client) != 1 || client[0].Iters != 100 {
				t.Fatalf("client results %+v\n%s\nserver:\n%s", client, cout, sout)
			}
			if tool.Verb == Send {
				return // no VAddr printed
			}
			// The peer's target is a zero-based region: its address is
			// an offset into the device memory.
			for _, out := range []string{cout, sout} {
				m := regexp.MustCompile(`local address:.* VAddr 0x([0-9a-f]+)`).FindStringSubmatch(out)
				if m == nil {
					t.Fatalf("no local VAddr in\n%s", out)
				}
				if v, err := strconv.ParseUint(m[1], 16, 64); err != nil || v >= verbs.MaxDMSize {
					t.Errorf("local VAddr %s: not an offset into device memory", m[1])
				}
			}
		})
	}
	bad := Config{Tool: Tools()[0], DeviceMemory: true, OwnMemory: true}
	if err := bad.Normalize(); err == nil {
		t.Error("device memory and own memory at once accepted")
	}
}
