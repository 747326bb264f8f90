package main

// The lib endpoint: stock perftest and ibverbs-utils on the host over
// xdproce's drop-in libibverbs.so.1 (make provider), run the way a user
// runs them, through `xdproce run -d IFACE -- TOOL`.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/xdproce/xdproce/test/interop/proc"
)

const (
	// libDevice is the verbs device xdproce's library shows for hostIface.
	libDevice = "xdp_" + hostIface
	// verbsLib is the library the stock tools load from xdproce's lib dir.
	verbsLib = "libibverbs.so.1"
	// cmLib is the rdma_cm library the rdma_cm lib cells load beside it.
	cmLib = "librdmacm.so.1"
	// hostPackages hold the stock tools of the lib cells (Debian's):
	// perftest, rdma-core's ping-pongs, rping/ucmatose/udaddy, qperf,
	// fi_pingpong.
	hostPackages = "perftest ibverbs-utils rdmacm-utils qperf libfabric-bin"
)

// checkLib makes sure the lib cells can run: xdproce has a run command, its
// libibverbs.so.1 is where xdproce run looks (built with make provider when
// the default binary's is missing), and the host has the stock tools
// (installed with apt when missing, as the other targets install theirs).
func (h *harness) checkLib(ctx context.Context, tools []string, needCM bool) error {
	out, _ := proc.Run(ctx, 30*time.Second, h.xdproce, "run", "--help")
	if !strings.Contains(out, "xdproce run") {
		return fmt.Errorf("%s has no run command (run --help: %s)", h.xdproce, firstLine(out))
	}
	dir, err := h.libDir(ctx)
	if err != nil {
		return err
	}
	h.progress("stock tools on the host load %s from %s", verbsLib, dir)
	if needCM {
		h.cmLibErr = h.checkCMLib(ctx, dir)
		if h.cmLibErr != nil {
			h.progress("no drop-in librdmacm, the rdma_cm lib cells fail: %v", h.cmLibErr)
		}
	}
	if missing := missingTools(tools); len(missing) > 0 {
		h.progress("installing %s on the host (%s missing)", hostPackages, strings.Join(missing, ", "))
		out, err := proc.Run(ctx, 10*time.Minute, "sh", "-c",
			"apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "+hostPackages)
		if err != nil {
			return fmt.Errorf("apt-get install %s: %w\n%s", hostPackages, err, lastLines(out, 10))
		}
		if missing := missingTools(tools); len(missing) > 0 {
			return fmt.Errorf("not on the host's PATH after installing %s: %s", hostPackages, strings.Join(missing, ", "))
		}
	}
	return nil
}

// missingTools are the tools (and stdbuf) not on the PATH.
func missingTools(tools []string) []string {
	var missing []string
	for _, t := range append([]string{"stdbuf"}, tools...) {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	return missing
}

// libDirs are where xdproce run looks for its libibverbs.so.1, in order:
// $XDPROCE_LIBDIR alone if set, else lib beside the binary (a build in the
// repository), then ../lib/xdproce (make install).
func libDirs(env, exe string) []string {
	if env != "" {
		return []string{env}
	}
	bin := filepath.Dir(exe)
	return []string{filepath.Join(bin, "lib"), filepath.Join(bin, "..", "lib", "xdproce")}
}

// libDir finds the library as xdproce run will, and builds it with make
// provider when the repository's own bin/xdproce has none beside it.
func (h *harness) libDir(ctx context.Context) (string, error) {
	env := os.Getenv("XDPROCE_LIBDIR")
	dirs := libDirs(env, h.xdproce)
	find := func() string {
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, verbsLib)); err == nil {
				return d
			}
		}
		return ""
	}
	if d := find(); d != "" {
		return d, nil
	}
	if env == "" && h.opts.xdproce == "" {
		h.progress("building %s (make provider)", filepath.Join(dirs[0], verbsLib))
		out, err := proc.Run(ctx, 10*time.Minute, "make", "-C", h.root, "provider")
		if err != nil {
			return "", fmt.Errorf("make provider: %w\n%s", err, lastLines(out, 10))
		}
		if d := find(); d != "" {
			return d, nil
		}
	}
	where := strings.Join(dirs, " or ")
	if env != "" {
		where += " ($XDPROCE_LIBDIR)"
	}
	return "", fmt.Errorf("no %s in %s: make provider builds it into bin/lib beside bin/xdproce (or set $XDPROCE_LIBDIR)", verbsLib, where)
}

// checkCMLib makes sure xdproce's librdmacm.so.1 is beside its
// libibverbs.so.1 in dir, for the rdma_cm lib cells (perftest -R,
// rdmacm-utils, qperf -cm1): built with make provider when the
// repository's own bin/xdproce has none.
func (h *harness) checkCMLib(ctx context.Context, dir string) error {
	path := filepath.Join(dir, cmLib)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if os.Getenv("XDPROCE_LIBDIR") == "" && h.opts.xdproce == "" {
		h.progress("building %s (make provider)", path)
		out, err := proc.Run(ctx, 10*time.Minute, "make", "-C", h.root, "provider")
		if err != nil {
			return fmt.Errorf("make provider: %w\n%s", err, lastLines(out, 10))
		}
		if _, err := os.Stat(path); err == nil {
			return nil
		}
	}
	return fmt.Errorf("no %s in %s beside %s: the rdma_cm lib cells need xdproce's drop-in librdmacm (make provider builds it into bin/lib)", cmLib, dir, verbsLib)
}

// libCM: a lib cell among cells loads librdmacm.so.1.
func libCM(cells []cell) bool {
	for _, c := range cells {
		if c.libCell() && c.needsRDMACM() {
			return true
		}
	}
	return false
}

// daemonListening reports whether an xdproce daemon listens for hostIface
// in the netns: its abstract socket @xdproce/IFACE in /proc/net/unix, as
// xdproce list finds it.
func daemonListening(ctx context.Context) (bool, error) {
	out, err := proc.Run(ctx, 10*time.Second, "ip", "netns", "exec", netns, "cat", "/proc/net/unix")
	if err != nil {
		return false, fmt.Errorf("reading the netns's unix sockets: %w", err)
	}
	return unixListener(out, "@xdproce/"+hostIface), nil
}

// unixListener finds a listening socket named name in /proc/net/unix
// (Num RefCount Protocol Flags Type St Inode Path; a listener's flags have
// __SO_ACCEPTCON, 0x10000).
func unixListener(procNetUnix, name string) bool {
	for l := range strings.Lines(procNetUnix) {
		f := strings.Fields(l)
		if len(f) >= 8 && f[3] == "00010000" && f[7] == name {
			return true
		}
	}
	return false
}

// reapDaemon checks, after a lib cell, that the daemon xdproce run started
// is gone, giving it a few seconds (xdproce run waits for it, but a killed
// xdproce run leaves that to the daemon's parent-death signal). One still
// listening is stopped with xdproce down, and reported.
func (h *harness) reapDaemon(ctx context.Context) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		up, err := daemonListening(ctx)
		if err != nil {
			return err
		}
		if !up {
			return nil
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	out, err := proc.Run(ctx, 30*time.Second, "ip", "netns", "exec", netns, h.xdproce, "down", "-d", hostIface)
	msg := "a daemon for " + hostIface + " was still running 15 s after the cell"
	if err != nil {
		return fmt.Errorf("%s; xdproce down: %w (%s)", msg, err, firstLine(out))
	}
	return errors.New(msg + " (stopped with xdproce down)")
}

// libTools are the stock tools the lib cells among cells run on the host.
func libTools(cells []cell) []string {
	var tools []string
	for _, c := range cells {
		if c.libCell() && !slices.Contains(tools, c.Tool) {
			tools = append(tools, c.Tool)
		}
	}
	return tools
}
