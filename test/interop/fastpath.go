package main

import (
	"fmt"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/xdproce/xdproce/internal/nsenter"
	"github.com/xdproce/xdproce/loader"
)

// passOnBridgePort attaches an XDP program that passes everything to the
// bridge's end of the host's veth for a fast-path cell: veth hands the
// frames xdproce's program sends with XDP_TX (its ACKs) only to a peer
// that runs XDP (docs/fastpath.md), and without one rxe would see none of
// them. The returned function detaches it.
func passOnBridgePort() (detach func() error, err error) {
	ns, err := vnetns.GetFromName(netns)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", netns, err)
	}
	defer ns.Close()
	var l interface{ Close() error }
	err = nsenter.Do(ns, func() error {
		port, err := netlink.LinkByName(hostIface + "-br")
		if err != nil {
			return fmt.Errorf("the bridge's end of %s: %w", hostIface, err)
		}
		l, err = loader.AttachPass(port.Attrs().Index)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("XDP pass program on the bridge port: %w", err)
	}
	return l.Close, nil
}
