package bench

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/xdproce/xdproce/internal/nsenter"
)

// existingHosts measures between two given interfaces, each "NETNS/IFNAME"
// (NETNS a name under /run/netns, as `ip netns` lists) or "IFNAME" in the
// calling namespace. They must be in different namespaces: between two
// addresses of one namespace the kernel carries TCP over loopback, never over
// the link, and the comparison would be meaningless.
func existingHosts(a, b string) ([2]*Host, func() error, error) {
	var hosts [2]*Host
	var handles []vnetns.NsHandle
	closeAll := func() error {
		var errs []error
		for _, h := range handles {
			errs = append(errs, h.Close())
		}
		return errors.Join(errs...)
	}
	for i, spec := range []string{a, b} {
		h, handle, err := existingHost(spec)
		if err != nil {
			return hosts, nil, errors.Join(err, closeAll())
		}
		hosts[i] = h
		handles = append(handles, handle)
	}
	if handles[0].Equal(handles[1]) {
		return hosts, nil, errors.Join(fmt.Errorf("bench: --ifaces %s and %s are in the same network namespace: TCP between them would take loopback, not the link", a, b), closeAll())
	}
	return hosts, closeAll, nil
}

func existingHost(spec string) (*Host, vnetns.NsHandle, error) {
	nsName, ifname, inNS := strings.Cut(spec, "/")
	if !inNS {
		nsName, ifname = "", spec
	}
	var handle vnetns.NsHandle
	var err error
	if nsName == "" {
		handle, err = vnetns.Get()
	} else {
		handle, err = vnetns.GetFromName(nsName)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("bench: network namespace %q: %w", nsName, err)
	}
	h := &Host{Name: nsName, Link: ifname, do: func(fn func() error) error { return nsenter.Do(handle, fn) }}
	if h.Name == "" {
		h.Name = "(this namespace)"
	}
	nl, err := netlink.NewHandleAt(handle)
	if err != nil {
		return nil, 0, errors.Join(fmt.Errorf("bench: netlink in %s: %w", h.Name, err), handle.Close())
	}
	defer nl.Close()
	link, err := nl.LinkByName(ifname)
	if err != nil {
		return nil, 0, errors.Join(fmt.Errorf("bench: %s in %s: %w", ifname, h.Name, err), handle.Close())
	}
	h.MTU = link.Attrs().MTU
	addrs, err := nl.AddrList(link, netlink.FAMILY_V4)
	if err != nil || len(addrs) == 0 {
		return nil, 0, errors.Join(fmt.Errorf("bench: %s in %s has no IPv4 address (%v)", ifname, h.Name, err), handle.Close())
	}
	var ok bool
	if h.Addr, ok = netip.AddrFromSlice(addrs[0].IP.To4()); !ok {
		return nil, 0, errors.Join(fmt.Errorf("bench: %s: bad address %v", ifname, addrs[0].IP), handle.Close())
	}
	return h, handle, nil
}
