package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
)

// rstreamResult matches a result line of rstream or riostream: the test's
// name, then its transfer size, count, iterations, total bytes and time.
var rstreamResult = regexp.MustCompile(`(?m)^\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+[0-9.]+s\s+[0-9.]+\s+[0-9.]+$`)

// TestStockRsockets runs rdmacm-utils' rsocket programs, compiled against
// rdma-core and unmodified, on xdproce's librdmacm.so.1 between the daemons
// of two namespaces: rstream and riostream with several transfer sizes,
// blocking, non-blocking and rpoll-driven (-T b, n, a), addressed through
// rdma_getaddrinfo (-T r), the data verified (-T v); a server whose peer is
// killed mid-transfer; rcopy; and ordinary TCP programs (socat, iperf 2)
// under Debian's librspreload.so.
func TestStockRsockets(t *testing.T) {
	netns.RequireRoot(t)
	requireStock(t, "rstream", "riostream", "rcopy")
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	daemonUp(t, bin, a)
	daemonUp(t, bin, b)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bs := b.Addr.String()

	for _, c := range []struct {
		name string
		prog string
		opts []string
	}{
		{"rstream 1000B verify", "rstream", []string{"-S", "1000", "-C", "2000", "-T", "v"}},
		{"rstream 64KiB blocking verify", "rstream", []string{"-S", "65536", "-C", "300", "-T", "b", "-T", "v"}},
		{"rstream 1MiB rpoll verify", "rstream", []string{"-S", "1048576", "-C", "30", "-T", "a", "-T", "v"}},
		{"rstream 64B nonblocking inline 0", "rstream", []string{"-S", "64", "-C", "3000", "-T", "n", "-i", "0"}},
		{"rstream 4KiB rdma_getaddrinfo", "rstream", []string{"-S", "4096", "-C", "500", "-T", "r", "-T", "v"}},
		{"rstream 100KiB small buffers", "rstream", []string{"-S", "100000", "-C", "100", "-B", "8192", "-T", "v"}},
		// -k: SO_KEEPALIVE and TCP_KEEPIDLE set and read back (TestStockRsocketChecks counts
		// the keepalives on the wire)
		{"rstream keepalive", "rstream", []string{"-S", "65536", "-C", "200", "-T", "b", "-k", "1"}},
		{"riostream 1000B verify", "riostream", []string{"-S", "1000", "-C", "1000", "-T", "v"}},
		{"riostream 64KiB blocking verify", "riostream", []string{"-S", "65536", "-C", "200", "-T", "b", "-T", "v"}},
		{"riostream 1MiB rpoll verify", "riostream", []string{"-S", "1048576", "-C", "20", "-T", "a", "-T", "v"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, cli := stockPair(t, ctx, lib, b, append([]string{c.prog, "-b", bs}, c.opts...),
				a, append([]string{c.prog, "-s", bs}, c.opts...), false)
			for _, out := range []string{srv, cli} {
				if !rstreamResult.MatchString(out) || strings.Contains(out, "rsocket") {
					t.Fatalf("%s: no result line, or an error:\nclient:\n%s\nserver:\n%s", c.prog, cli, srv)
				}
			}
		})
	}

	// A peer killed mid-transfer says nothing in band: its daemon's CM
	// disconnects, and the survivor, blocked in rrecv or in rpoll, learns of
	// it from its ID's CM channel (an abort: ECONNRESET, POLLERR) and exits.
	for i, mode := range []string{"b", "a"} {
		t.Run("peer killed, -T "+mode, func(t *testing.T) {
			port := strconv.Itoa(7490 + i)
			argv := []string{"-p", port, "-S", "65536", "-C", "1000000", "-T", mode}
			srv, sout := startOnLibrary(t, ctx, lib, b, append([]string{"rstream", "-b", bs}, argv...)...)
			time.Sleep(500 * time.Millisecond)
			cli, _ := startOnLibrary(t, ctx, lib, a, append([]string{"rstream", "-s", bs}, argv...)...)
			time.Sleep(1500 * time.Millisecond) // mid-transfer: a million 64 KiB transfers take minutes
			_ = cli.Process.Kill()
			_ = cli.Wait()
			exited := make(chan error, 1)
			go func() { exited <- srv.Wait() }()
			select {
			case err := <-exited:
				if err == nil {
					t.Fatalf("the server exited 0 after its peer was killed:\n%s", sout.String())
				}
			case <-time.After(15 * time.Second):
				_ = srv.Process.Kill()
				<-exited
				t.Fatalf("the server did not notice its peer killed within 15 s:\n%s", sout.String())
			}
		})
	}

	t.Run("rcopy", func(t *testing.T) {
		dir := t.TempDir()
		src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
		data := make([]byte, 3<<20+12345)
		if _, err := rand.Read(data); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(src, data, 0o600); err != nil {
			t.Fatal(err)
		}
		// rcopy's server serves forever: stopped once the client is done.
		srv, cli := stockPair(t, ctx, lib, b, []string{"rcopy", "-p", "7472"},
			a, []string{"rcopy", src, bs + ":" + dst, "-p", "7472"}, true)
		got, err := os.ReadFile(dst)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("rcopy: the copy differs (%d bytes of %d, %v)\nclient:\n%s\nserver:\n%s", len(got), len(data), err, cli, srv)
		}
	})

	t.Run("socat under librspreload", func(t *testing.T) {
		requireStock(t, "socat")
		if _, err := os.Stat(rspreload); err != nil {
			t.Fatalf("librspreload (librdmacm1) is not installed: %v", err)
		}
		data := make([]byte, 2<<20+777)
		if _, err := rand.Read(data); err != nil {
			t.Fatal(err)
		}
		tcp := decoyTCP(t, b, bs+":7473")
		env := append(os.Environ(), "LD_LIBRARY_PATH="+lib, "LD_PRELOAD="+rspreload)
		var got, srvErr, cliOut bytes.Buffer
		srv := exec.CommandContext(ctx, "socat", "-u", "TCP4-LISTEN:7473,bind="+bs, "STDOUT")
		srv.Env, srv.Stdout, srv.Stderr = env, &got, &srvErr
		if err := b.Start(srv); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // the server listens
		cli := exec.CommandContext(ctx, "socat", "-u", "STDIN", "TCP4:"+bs+":7473")
		cli.Env, cli.Stdin, cli.Stdout, cli.Stderr = env, bytes.NewReader(data), &cliOut, &cliOut
		if err := a.Start(cli); err != nil {
			t.Fatal(err)
		}
		cerr, serr := cli.Wait(), srv.Wait()
		if n := tcp.Load(); n > 0 {
			t.Errorf("%d TCP connections reached the decoy: the program did not run over rsockets", n)
		}
		if cerr != nil || serr != nil || !bytes.Equal(got.Bytes(), data) {
			t.Fatalf("socat: client %v, server %v; %d bytes of %d arrived intact: %v\nclient:\n%s\nserver:\n%s",
				cerr, serr, got.Len(), len(data), bytes.Equal(got.Bytes(), data), cliOut.String(), srvErr.String())
		}
	})

	t.Run("iperf under librspreload", func(t *testing.T) {
		requireStock(t, "iperf")
		tcp := decoyTCP(t, b, bs+":5001")
		env := append(os.Environ(), "LD_LIBRARY_PATH="+lib, "LD_PRELOAD="+rspreload)
		var srvOut, cliOut bytes.Buffer
		srv := exec.CommandContext(ctx, "iperf", "-s", "-B", bs)
		srv.Env, srv.Stdout, srv.Stderr = env, &srvOut, &srvOut
		if err := b.Start(srv); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
		time.Sleep(500 * time.Millisecond)
		cli := exec.CommandContext(ctx, "iperf", "-c", bs, "-t", "2")
		cli.Env, cli.Stdout, cli.Stderr = env, &cliOut, &cliOut
		if err := a.Start(cli); err != nil {
			t.Fatal(err)
		}
		err := cli.Wait()
		if n := tcp.Load(); n > 0 {
			t.Errorf("%d TCP connections reached the decoy: iperf did not run over rsockets", n)
		}
		if m := iperfResult.FindStringSubmatch(cliOut.String()); err != nil || m == nil || m[1] == "0.00" {
			t.Fatalf("iperf: %v\nclient:\n%s\nserver:\n%s", err, cliOut.String(), srvOut.String())
		}
	})
}

// iperfResult matches iperf 2's summary line: interval, transfer, bandwidth.
var iperfResult = regexp.MustCompile(`(?m)sec\s+[0-9.]+ [KMG]Bytes\s+([0-9.]+) [KMG]bits/sec`)

// rspreload is Debian's librspreload (librdmacm1): socket calls of an
// ordinary program become rsocket calls of the librdmacm.so.1 it loads.
const rspreload = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so"

// decoyTCP listens on addr with kernel TCP in h's namespace for the test's
// life and counts the connections it gets. A program under librspreload
// that fell back to TCP (librspreload does when rsocket fails) either
// cannot bind the port (a server) or reaches the decoy (a client), so a
// test that passes with no connection counted ran over rsockets: rdma_cm's
// port space is not the kernel's TCP one.
func decoyTCP(t *testing.T, h *netns.Host, addr string) *atomic.Int32 {
	t.Helper()
	var ln net.Listener
	if err := h.Do(func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return &n
}

// TestStockRsocketChecks runs provider/test/rsocket_check.c, compiled
// against Debian's librdmacm-dev, on xdproce's librdmacm.so.1: the errno of
// rsocket API misuse (bad descriptors, calls on a socket not connected, a
// refused non-blocking connect through rpoll and SO_ERROR, a non-blocking
// listener, options read back), and a hostile peer: a raw rdma_cm and
// verbs client that speaks the rsocket protocol, writes a valid message,
// then forges a data message longer than the receiver's buffer. The
// receiver reads the valid bytes, then sees the connection fail (rrecv and
// SO_ERROR: EPROTO), never bytes from outside its buffer. The same raw peer
// counts the keepalives an idle rsocket with SO_KEEPALIVE and TCP_KEEPIDLE 1
// sends: zero-length writes with immediate 0xE0000001, at least two in 3.5 s.
func TestStockRsocketChecks(t *testing.T) {
	netns.RequireRoot(t)
	lib := providerLibs(t)
	check := buildProviderCheck(t, "rsocket_check", "-lrdmacm", "-libverbs")
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	daemonUp(t, bin, a)
	daemonUp(t, bin, b)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	okLine := regexp.MustCompile(`(?m)^ok: \d+ checks, 0 failed$`)

	t.Run("misuse", func(t *testing.T) {
		c, out := startOnLibrary(t, ctx, lib, a, check, "misuse", a.Addr.String())
		if err := c.Wait(); err != nil || !okLine.MatchString(out.String()) {
			t.Fatalf("rsocket_check misuse: %v\n%s", err, out.String())
		}
	})
	t.Run("forged data length", func(t *testing.T) {
		srv, cli := stockPair(t, ctx, lib, b, []string{check, "serve", b.Addr.String(), "7481"},
			a, []string{check, "forge", b.Addr.String(), "7481"}, false)
		if !okLine.MatchString(srv) || !okLine.MatchString(cli) {
			t.Fatalf("server:\n%s\nforger:\n%s", srv, cli)
		}
	})
	t.Run("keepalive on the wire", func(t *testing.T) {
		srv, cli := stockPair(t, ctx, lib, b, []string{check, "serve-keepalive", b.Addr.String(), "7482"},
			a, []string{check, "count-keepalives", b.Addr.String(), "7482"}, false)
		if !okLine.MatchString(srv) || !okLine.MatchString(cli) {
			t.Fatalf("server:\n%s\nraw peer:\n%s", srv, cli)
		}
	})
}
