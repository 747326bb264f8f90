package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/nsenter"
)

// runDir is where named namespaces are bind-mounted (iproute2's place).
const runDir = "/run/netns"

// Namespace is a named network namespace, bind-mounted under /run/netns so
// that `ip netns` lists it and `ip netns exec` can enter it.
type Namespace struct {
	name   string
	handle vnetns.NsHandle
}

// Name is the namespace's name under /run/netns.
func (n *Namespace) Name() string { return n.name }

// Path is the namespace's bind mount, usable with setns(2) or
// `nsenter --net=PATH`.
func (n *Namespace) Path() string { return filepath.Join(runDir, n.name) }

// Handle is an open file descriptor of the namespace, valid until the
// topology is closed.
func (n *Namespace) Handle() vnetns.NsHandle { return n.handle }

// Do runs fn with the calling goroutine locked to its OS thread and that
// thread in this namespace, then switches the thread back. Sockets, XDP
// attachments and netlink handles created inside fn belong to this
// namespace for good and may be used from any goroutine afterwards.
// Goroutines started by fn do not inherit the namespace. If switching back
// fails the thread stays locked, so the runtime discards it when the
// goroutine exits instead of reusing a thread in the wrong namespace.
func (n *Namespace) Do(fn func() error) error {
	return nsenter.Do(n.handle, fn)
}

// Start starts cmd inside the namespace: the child is forked from a thread
// switched into it, so it inherits the namespace (no iproute2 needed).
func (n *Namespace) Start(cmd *exec.Cmd) error {
	return n.Do(cmd.Start)
}

// Exec runs a command in the namespace and returns its combined output.
// The error includes the output.
func (n *Namespace) Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := n.Start(cmd); err != nil {
		return nil, fmt.Errorf("netns %s: start %s: %w", n.name, name, err)
	}
	if err := cmd.Wait(); err != nil {
		return out.Bytes(), fmt.Errorf("netns %s: %s %s: %w: %s", n.name, name, strings.Join(args, " "), err,
			bytes.TrimSpace(out.Bytes()))
	}
	return out.Bytes(), nil
}

// Netlink returns a netlink handle whose sockets live in the namespace;
// the caller closes it.
func (n *Namespace) Netlink() (*netlink.Handle, error) {
	h, err := netlink.NewHandleAt(n.handle)
	if err != nil {
		return nil, fmt.Errorf("netns %s: netlink: %w", n.name, err)
	}
	return h, nil
}

// nsSysctls are written inside a new namespace before any link exists, so
// that links created later inherit them through the "default" entries.
type nsSysctls struct {
	ipv6    bool
	forward bool
}

func (s nsSysctls) apply() error {
	var set [][2]string
	if s.ipv6 {
		// No duplicate address detection: addresses are usable at once.
		set = append(set,
			[2]string{"net/ipv6/conf/all/accept_dad", "0"},
			[2]string{"net/ipv6/conf/default/accept_dad", "0"})
		if s.forward {
			set = append(set, [2]string{"net/ipv6/conf/all/forwarding", "1"})
		}
	} else {
		// No IPv6 at all: no router solicitations or MLD reports on the
		// links to confuse packet counts.
		set = append(set,
			[2]string{"net/ipv6/conf/all/disable_ipv6", "1"},
			[2]string{"net/ipv6/conf/default/disable_ipv6", "1"})
	}
	if s.forward {
		set = append(set, [2]string{"net/ipv4/ip_forward", "1"})
	}
	for _, kv := range set {
		err := os.WriteFile(filepath.Join("/proc/sys", kv[0]), []byte(kv[1]), 0)
		if err != nil && !(errors.Is(err, os.ErrNotExist) && strings.HasPrefix(kv[0], "net/ipv6/") && !s.ipv6) {
			return fmt.Errorf("sysctl %s=%s: %w", strings.ReplaceAll(kv[0], "/", "."), kv[1], err)
		}
	}
	return nil
}

// createNamespace makes a named namespace with lo up. The work happens on
// a throwaway OS thread (locked and never unlocked, so the runtime ends it)
// because creating a namespace moves the creating thread into it.
func createNamespace(name string, sysctls nsSysctls) (*Namespace, error) {
	type result struct {
		h   vnetns.NsHandle
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.err = fmt.Errorf("panic: %v", p)
			}
			done <- r
		}()
		r.h, r.err = vnetns.NewNamed(name)
		if r.err != nil {
			return
		}
		// /proc/sys/net is the opening thread's namespace: this one.
		r.err = sysctls.apply()
	}()
	r := <-done
	if r.err != nil {
		if r.h.IsOpen() {
			r.h.Close()
			_ = deleteNamed(name)
		} else if !errors.Is(r.err, os.ErrExist) {
			_ = deleteNamed(name) // NewNamed may leave an unmounted file behind
		}
		return nil, fmt.Errorf("netns: create %s: %w", name, r.err)
	}
	n := &Namespace{name: name, handle: r.h}
	if err := n.linkUp("lo"); err != nil {
		n.delete()
		return nil, err
	}
	return n, nil
}

func (n *Namespace) linkUp(name string) error {
	h, err := n.Netlink()
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netns %s: link %s: %w", n.name, name, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("netns %s: set %s up: %w", n.name, name, err)
	}
	return nil
}

// delete removes the bind mount and closes the handle; the kernel then
// destroys the namespace and every link in it (a veth pair dies with
// either end).
func (n *Namespace) delete() error {
	if n.handle.IsOpen() {
		n.handle.Close()
		n.handle = vnetns.None()
	}
	return deleteNamed(n.name)
}

// deleteNamed unmounts and removes /run/netns/name, tolerating a missing
// mount (e.g. a half-created namespace) or file.
func deleteNamed(name string) error {
	p := filepath.Join(runDir, name)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
		return fmt.Errorf("netns: unmount %s: %w", p, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netns: delete %s: %w", name, err)
	}
	return nil
}
