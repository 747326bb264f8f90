package perftest

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cmagent"
	"github.com/xdproce/xdproce/rdmacm"
	"github.com/xdproce/xdproce/wire"
)

// testCM shortens the connection manager's timers (a REQ again after
// 288 ms, a DREQ after 256 ms, timewait 128 ms) so that runs end quickly,
// yet long enough that a loaded machine does not make the CM resend.
var testCM = rdmacm.Options{PacketLifetime: 12, ResponseTimeout: 16}

// sizes records the sizes of the out-of-band messages one side writes.
type sizes struct {
	mu sync.Mutex
	n  []int
	b  [][]byte
}

func (r *sizes) record(b []byte) {
	r.mu.Lock()
	r.n = append(r.n, len(b))
	r.b = append(r.b, bytes.Clone(b))
	r.mu.Unlock()
}

// cmRun is one -R run between the two devices of a pair: the server on
// p.b (198.18.0.2), the client on p.a.
type cmRun struct {
	client, server []Result
	cout, sout     string
	ct, st         *sizes
	elapsed        time.Duration
	// What each side's connection manager held when it stopped.
	cmClient, cmServer cmLeft
}

// cmLeft is what a connection manager held when its session stopped it.
type cmLeft struct {
	ids, conns int
	counters   cmagent.Counters
}

func (l *cmLeft) record(svc *rdmacm.Service) {
	*l = cmLeft{ids: svc.IDs(), conns: svc.Connections(), counters: svc.Counters()}
}

// clean: every ID destroyed, every connection through timewait. (A MAD
// sent again is no fault: a loaded machine may keep a peer from answering
// within the test's short timeouts, and the CM then does its job.)
func (l cmLeft) clean() bool { return l.ids == 0 && l.conns == 0 }

// runPairCM runs cfg's tool with -R, the client starting delay after the
// server, and fails the test unless both sides succeed.
func runPairCM(t *testing.T, p memPair, cfg Config, delay time.Duration) cmRun {
	t.Helper()
	r, cerr, serr := runPairCMErr(t, p, cfg, delay)
	if cerr != nil || serr != nil {
		t.Fatalf("%v %v: client: %v\nserver: %v\nclient output:\n%s\nserver output:\n%s", cfg.Conn, cfg.Tool, cerr, serr, r.cout, r.sout)
	}
	return r
}

func runPairCMErr(t *testing.T, p memPair, cfg Config, delay time.Duration) (r cmRun, cerr, serr error) {
	t.Helper()
	cfg.RDMACM = true
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r.ct, r.st = &sizes{}, &sizes{}
	var cbuf, sbuf bytes.Buffer
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		r.server, serr = run(ctx, &session{cfg: cfg, dev: p.b, out: &sbuf, sent: r.st.record, cmOpts: testCM, cmStopped: r.cmServer.record})
	}()
	time.Sleep(delay)
	ccfg := cfg
	ccfg.Server = "198.18.0.2"
	r.client, cerr = run(ctx, &session{cfg: ccfg, dev: p.a, out: &cbuf, sent: r.ct.record, cmOpts: testCM, cmStopped: r.cmClient.record})
	if cerr != nil {
		cancel()
	}
	<-done
	r.elapsed = time.Since(start)
	r.cout, r.sout = cbuf.String(), sbuf.String()
	return r, cerr, serr
}

// Every RC tool of the brief runs over rdma_cm between two xdproce devices,
// with Verify checking every byte that arrives; ib_write_bw with 3 QPs,
// each its own data connection.
func TestRDMACMTools(t *testing.T) {
	for _, tool := range []Tool{{Send, BW}, {Send, Lat}, {Write, BW}, {Write, Lat}, {Read, BW}, {Read, Lat}, {Atomic, BW}} {
		t.Run(tool.String(), func(t *testing.T) {
			p := newMemPair(t)
			cfg := Config{Tool: tool, Iters: 200, Verify: true, GIDIndex: -1, ReportGbits: true}
			if tool.Verb != Atomic {
				cfg.Size = 3000
			}
			if tool == (Tool{Write, BW}) {
				cfg.QPs = 3
			}
			r := runPairCM(t, p, cfg, 0)
			if len(r.client) != 1 || r.client[0].Iters != 200*uint64(max(cfg.QPs, 1)) && tool.Test == BW ||
				tool.Test == Lat && r.client[0].Iters != 200 {
				t.Fatalf("client results %+v\n%s", r.client, r.cout)
			}
			if tool.Test == BW && (len(r.server) != 1 || r.server[0].AvgBps <= 0 || r.server[0].Iters != r.client[0].Iters) {
				t.Errorf("server results %+v\n%s", r.server, r.sout)
			}
			if tool.Test == Lat && r.client[0].Typical <= 0 {
				t.Errorf("client latency %+v", r.client[0])
			}
			for _, out := range []string{r.cout, r.sout} {
				if !strings.Contains(out, " rdma_cm QPs\t : ON\n") || !strings.Contains(out, " Data ex. method : rdma_cm") {
					t.Errorf("no rdma_cm lines in the banner:\n%s", out)
				}
				if strings.Contains(out, "Failed to disconnect") {
					t.Errorf("the data connections did not close:\n%s", out)
				}
			}
			if !strings.Contains(r.sout, " Waiting for client rdma_cm QP to connect\n") {
				t.Errorf("server banner:\n%s", r.sout)
			}
			if !strings.Contains(r.cout, " Data validation : ") && tool.Verb == Read && tool.Test == BW {
				t.Errorf("the READ client checked nothing:\n%s", r.cout)
			}
			// Both ends closed every connection (DREQ, DREP, timewait)
			// and freed every ID before their CMs stopped.
			if !r.cmClient.clean() || !r.cmServer.clean() {
				t.Errorf("left behind: client %+v, server %+v", r.cmClient, r.cmServer)
			}
		})
	}
}

// UD over rdma_cm is SIDR: the client's address handle comes from the
// lookup's answer, the latency server's from the client's first datagram
// (its QPN in the immediate). Every datagram arrives intact.
func TestRDMACMUD(t *testing.T) {
	for _, tool := range []Tool{{Send, BW}, {Send, Lat}} {
		t.Run(tool.String(), func(t *testing.T) {
			p := newMemPair(t)
			cfg := Config{Tool: tool, Conn: UD, Iters: 300, Size: 2000, Verify: true, GIDIndex: -1}
			r := runPairCM(t, p, cfg, 0)
			if len(r.client) != 1 || r.client[0].Iters != 300 || r.client[0].Size != 2000 {
				t.Fatalf("client results %+v\n%s", r.client, r.cout)
			}
			if tool.Test == BW && (len(r.server) != 1 || r.server[0].Iters != 300) {
				t.Errorf("server results %+v\n%s", r.server, r.sout)
			}
			if !strings.Contains(r.cout, " Connection type : UD") {
				t.Errorf("banner:\n%s", r.cout)
			}
			if !r.cmClient.clean() || !r.cmServer.clean() {
				t.Errorf("left behind: client %+v, server %+v", r.cmClient, r.cmServer)
			}
		})
	}
}

// UD messages are single packets: a default size above the path MTU
// becomes the MTU, as perftest's check_mtu does; an explicit one is an
// error.
func TestRDMACMUDSizeIsMTU(t *testing.T) {
	p := newMemPair(t)
	r := runPairCM(t, p, Config{Tool: Tool{Send, BW}, Conn: UD, Iters: 50, MTU: 1024, GIDIndex: -1}, 0)
	if len(r.client) != 1 || r.client[0].Size != 1024 || !strings.Contains(r.cout, " Max msg size in UD is MTU 1024\n") {
		t.Fatalf("results %+v\n%s", r.client, r.cout)
	}
	p = newMemPair(t)
	_, cerr, serr := runPairCMErr(t, p, Config{Tool: Tool{Send, BW}, Conn: UD, Iters: 50, MTU: 1024, Size: 2048, GIDIndex: -1, Timeout: 3 * time.Second}, 0)
	if cerr == nil || serr == nil {
		t.Fatalf("a 2048-byte UD message at MTU 1024: client %v, server %v", cerr, serr)
	}
}

// -a over UD sweeps up to the MTU.
func TestRDMACMUDAllSizes(t *testing.T) {
	p := newMemPair(t)
	r := runPairCM(t, p, Config{Tool: Tool{Send, Lat}, Conn: UD, Iters: 20, AllSizes: true, MTU: 2048, GIDIndex: -1, Verify: true}, 0)
	if len(r.client) != 11 || r.client[10].Size != 2048 {
		t.Fatalf("sizes %+v\n%s", r.client, r.cout)
	}
}

// A client that starts before the server listens is refused (REJ reason
// 8) and tries again, as the TCP channel does on ECONNREFUSED.
func TestRDMACMClientFirst(t *testing.T) {
	p := newMemPair(t)
	var cbuf, sbuf bytes.Buffer
	cfg := Config{Tool: Tool{Write, Lat}, Iters: 50, GIDIndex: -1, RDMACM: true, Timeout: 20 * time.Second}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cerrc := make(chan error, 1)
	go func() {
		ccfg := cfg
		ccfg.Server = "198.18.0.2"
		_, err := run(ctx, &session{cfg: ccfg, dev: p.a, out: &cbuf, cmOpts: testCM})
		cerrc <- err
	}()
	time.Sleep(400 * time.Millisecond)
	_, serr := run(ctx, &session{cfg: cfg, dev: p.b, out: &sbuf, cmOpts: testCM})
	if cerr := <-cerrc; cerr != nil || serr != nil {
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, &cbuf, serr, &sbuf)
	}
}

// A server that listens for the data connections after its side of the
// hand shake before them, as perftest does, may refuse the client's first
// requests: REJ reason 8 for RC, the SIDR reply "unsupported" for UD. The
// client asks again.
func TestRDMACMLateListener(t *testing.T) {
	for _, c := range []struct {
		conn ConnType
		tool Tool
	}{{RC, Tool{Write, BW}}, {UD, Tool{Send, Lat}}} {
		t.Run(c.conn.String(), func(t *testing.T) {
			p := newMemPair(t)
			cfg := Config{Tool: c.tool, Conn: c.conn, Iters: 50, QPs: 2, GIDIndex: -1, RDMACM: true, Timeout: 20 * time.Second}
			if c.conn == UD {
				cfg.QPs = 1
			}
			var cbuf, sbuf bytes.Buffer
			var left cmLeft
			cerrc := make(chan error, 1)
			go func() {
				ccfg := cfg
				ccfg.Server = "198.18.0.2"
				_, err := run(t.Context(), &session{cfg: ccfg, dev: p.a, out: &cbuf, cmOpts: testCM, cmStopped: left.record})
				cerrc <- err
			}()
			_, serr := run(t.Context(), &session{cfg: cfg, dev: p.b, out: &sbuf, cmOpts: testCM, lateListen: 300 * time.Millisecond})
			if cerr := <-cerrc; cerr != nil || serr != nil {
				t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, &cbuf, serr, &sbuf)
			}
			if left.counters.Received == 0 || left.ids != 0 {
				t.Errorf("client CM %+v", left)
			}
		})
	}
}

// A -R client against no server at all gives up after Timeout.
func TestRDMACMNoServer(t *testing.T) {
	p := newMemPair(t)
	cfg := Config{Tool: Tool{Send, BW}, Iters: 50, GIDIndex: -1, RDMACM: true, Timeout: time.Second, Server: "198.18.0.2"}
	start := time.Now()
	_, err := run(t.Context(), &session{cfg: cfg, dev: p.a, out: &bytes.Buffer{}, cmOpts: testCM})
	if err == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("%v after %v", err, time.Since(start))
	}
}

// cmExchange is what an -R run writes on its control connection, derived
// from the same tool's TCP exchange: the two hand shakes around the data
// connections after the MTU, 56-byte binary key messages instead of the
// 108-byte text, and no "done" at the end.
func cmExchange(tcp []int) []int {
	var out []int
	for i, n := range tcp {
		if i == len(tcp)-1 && n == len("done\x00") {
			break
		}
		if n == KeyMsgSize {
			n = DestStructSize
		}
		out = append(out, n)
		if i == 3 {
			out = append(out, DestStructSize, DestStructSize)
		}
	}
	return out
}

// Each tool's exchange over rdma_cm is stock perftest's, message for
// message: derived from the golden TCP captures of stock perftest (every
// exchange but the ones -R adds or changes is the same in perftest's
// code), and, for ib_send_bw, over RC and UD, straight from captures of
// stock ib_send_bw -R.
func TestRDMACMExchangeMatchesStockPerftest(t *testing.T) {
	for _, g := range goldenRuns {
		t.Run(g.cfg.Tool.String(), func(t *testing.T) {
			wantC, wantS := goldenExchange(t, g.pcap)
			wantC, wantS = cmExchange(wantC), cmExchange(wantS)
			p := newMemPair(t)
			cfg := g.cfg
			cfg.GIDIndex = -1
			r := runPairCM(t, p, cfg, 0)
			if fmt.Sprint(r.ct.n) != fmt.Sprint(wantC) {
				t.Errorf("client wrote %v\nstock perftest %v\noutput:\n%s", r.ct.n, wantC, r.cout)
			}
			if fmt.Sprint(r.st.n) != fmt.Sprint(wantS) {
				t.Errorf("server wrote %v\nstock perftest %v\noutput:\n%s", r.st.n, wantS, r.sout)
			}
		})
	}
	for _, c := range []struct {
		pcap string
		conn ConnType
	}{{"rdma_cm_send.pcap", RC}, {"ud_cm_send.pcap", UD}} {
		t.Run(c.pcap, func(t *testing.T) {
			wantC, wantS, msgs := cmGoldenExchange(t, c.pcap)
			p := newMemPair(t)
			r := runPairCM(t, p, Config{Tool: Tool{Send, BW}, Conn: c.conn, Iters: 5, Size: 4096, GIDIndex: -1}, 0)
			if fmt.Sprint(r.ct.n) != fmt.Sprint(wantC) || fmt.Sprint(r.st.n) != fmt.Sprint(wantS) {
				t.Errorf("client wrote %v, server %v\nstock ib_send_bw -R: %v, %v", r.ct.n, r.st.n, wantC, wantS)
			}
			// The opening messages byte for byte; the zero hand shakes
			// around the data connections; the key structs as perftest
			// fills them for SEND (LID 0, out_reads 1, GID index 1).
			for i := range 6 {
				if !bytes.Equal(r.ct.b[i], msgs[i]) {
					t.Errorf("message %d: %x, stock %x", i, r.ct.b[i], msgs[i])
				}
			}
			d, err := ParseDestStruct(r.ct.b[6])
			if err != nil || d.LID != 0 || d.OutReads != 1 || d.GIDIndex != 1 || d.Addr() != netip.MustParseAddr("198.18.0.1") {
				t.Errorf("key struct %+v, %v", d, err)
			}
			if stock, _ := ParseDestStruct(msgs[6]); stock.LID != 0 || stock.OutReads != 1 || stock.GIDIndex != 1 {
				t.Errorf("stock key struct %+v", stock)
			}
		})
	}
}

// cmGoldenExchange reads a capture of stock perftest -R: the sizes of the
// SENDs each side made on the control connection (the first RC QPs that
// carry one), and the client's messages.
func cmGoldenExchange(t *testing.T, name string) (client, server []int, msgs [][]byte) {
	t.Helper()
	recs := goldenRecords(t, name)
	var clientIP netip.Addr
	var toServer, toClient uint32
	for _, rec := range recs {
		var p wire.Packet
		if err := wire.Decode(rec.Data, &p); err != nil {
			t.Fatal(err)
		}
		payload := append(append([]byte(nil), p.Payload...), p.PayloadTail...)
		if p.BTH.Opcode != wire.RCSendOnly || len(payload) == 0 {
			continue
		}
		switch {
		case !clientIP.IsValid():
			clientIP, toServer = p.IP.Src, p.BTH.DestQP
		case toClient == 0 && p.IP.Src != clientIP:
			toClient = p.BTH.DestQP
		}
		switch {
		case p.IP.Src == clientIP && p.BTH.DestQP == toServer:
			client = append(client, len(payload))
			msgs = append(msgs, payload)
		case p.IP.Src != clientIP && p.BTH.DestQP == toClient:
			server = append(server, len(payload))
		}
	}
	if len(client) < 8 {
		t.Fatalf("%s: %d client messages", name, len(client))
	}
	return client, server, msgs
}

// The key struct is struct pingpong_dest, big-endian field by field.
func TestDestStruct(t *testing.T) {
	d := Dest{LID: 0x12, OutReads: 16, QPN: 0x2f, PSN: 0x45e9e1, RKey: 0xabcd, VAddr: 0x55aed91ff000,
		GID: netip.MustParseAddr("::ffff:198.18.0.12").As16(), SRQN: 7, GIDIndex: 1}
	b := d.MarshalStruct()
	want := "00000012" + "00000010" + "0000002f" + "0045e9e1" + "0000abcd" + "00000000" + "000055aed91ff000" +
		"00000000000000000000ffffc612000c" + "00000007" + "00000001"
	if fmt.Sprintf("%x", b) != want {
		t.Fatalf("struct %x\nwant   %s", b, want)
	}
	if got, err := ParseDestStruct(b); err != nil || got != d {
		t.Fatalf("parsed %+v, %v", got, err)
	}
	if _, err := ParseDestStruct(b[:55]); err == nil {
		t.Error("a 55-byte struct parsed")
	}
}

// A UD datagram's position is unknown to the receiver: the pattern is
// checked from wherever its first byte says it starts.
func TestCheckPatternRun(t *testing.T) {
	b := make([]byte, 600)
	copyPattern(b, 300)
	if err := checkPatternRun(b); err != nil {
		t.Fatal(err)
	}
	b[400] ^= 1
	if checkPatternRun(b) == nil || checkPatternRun(make([]byte, 4)) == nil {
		t.Error("a broken pattern passed")
	}
}
