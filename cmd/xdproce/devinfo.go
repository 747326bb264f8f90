package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/xdproce/xdproce/loader"
	"github.com/xdproce/xdproce/nic"
	"github.com/xdproce/xdproce/verbs"
)

// portInfo is what devinfo prints about the device's single port.
type portInfo struct {
	link      loader.Link
	gids      []nic.GID
	activeMTU int
	// datapath is what opening the port found (nic.Features), or why it
	// could not be opened.
	datapath string
}

func devinfoFlags(fs *flag.FlagSet) action {
	dev := fs.String("dev", "", "network interface the device runs on (required)")
	probe := fs.Bool("probe", true, "open the port briefly (root) to find what this kernel and driver offer: XDP mode, zero-copy, multi-buffer, the active MTU they allow")
	return func(ctx context.Context, std stdio, _ []string) error {
		stdout := std.out
		if *dev == "" {
			return fmt.Errorf("%w: --dev IFACE is required", errUsage)
		}
		link, err := loader.LinkInfo(*dev)
		if err != nil {
			return err
		}
		gids, err := nic.GIDTable(link)
		if err != nil {
			return err
		}
		p := portInfo{link: link, gids: gids, activeMTU: nic.ActiveMTU(link.MTU), datapath: "not probed"}
		if *probe {
			p.activeMTU, p.datapath = probePort(ctx, *dev, p.activeMTU)
		}
		return writeDevinfo(stdout, p)
	}
}

// probePort opens the port as a device would (without the UDP 4791 guard,
// which a running rxe or xdproce holds) and closes it again: the features
// and active MTU this kernel and driver give, or why it cannot open.
func probePort(ctx context.Context, ifname string, activeMTU int) (int, string) {
	port, err := nic.Open(ctx, nic.Config{Ifname: ifname, NoGuard: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return activeMTU, "cannot open: " + err.Error()
	}
	f := port.Features()
	desc := f.String() + verbs.DescribeRxCoalesce(verbs.RxCoalesceFor(0)) // what a device opened here by default gets (unless it busy-polls)
	if err := port.Close(); err != nil {
		return f.ActiveMTU, desc + " (closing: " + err.Error() + ")"
	}
	return f.ActiveMTU, desc
}

// writeDevinfo prints the device in the layout of `ibv_devinfo -v`.
func writeDevinfo(w io.Writer, p portInfo) error {
	state, phys := "PORT_DOWN (1)", "DISABLED (3)"
	if p.link.Up && (p.link.OperState == "up" || p.link.OperState == "unknown") {
		state, phys = "PORT_ACTIVE (4)", "LINK_UP (5)"
	}
	guid := formatGUID(verbs.NodeGUID(p.link.MAC))
	var b strings.Builder
	fmt.Fprintf(&b, "hca_id:\t%s\n", nic.DeviceName(p.link.Name))
	fmt.Fprintf(&b, "\ttransport:\t\t\tInfiniBand (0)\n")
	fmt.Fprintf(&b, "\tnetdev:\t\t\t\t%s\n", p.link.Name)
	fmt.Fprintf(&b, "\tnode_guid:\t\t\t%s\n", guid)
	fmt.Fprintf(&b, "\tsys_image_guid:\t\t\t%s\n", guid)
	fmt.Fprintf(&b, "\tphys_port_cnt:\t\t\t1\n")
	fmt.Fprintf(&b, "\tmax_mr_size:\t\t\t%#x\n", uint64(verbs.MaxMRSize))
	fmt.Fprintf(&b, "\tmax_qp:\t\t\t\t%d\n", verbs.MaxQP)
	fmt.Fprintf(&b, "\tmax_qp_wr:\t\t\t%d\n", verbs.MaxQPWR)
	fmt.Fprintf(&b, "\tmax_sge:\t\t\t%d\n", verbs.MaxSGE)
	fmt.Fprintf(&b, "\tmax_cqe:\t\t\t%d\n", verbs.MaxCQE)
	fmt.Fprintf(&b, "\tmax_qp_rd_atom:\t\t\t%d\n", verbs.MaxRdAtomic)
	fmt.Fprintf(&b, "\tmax_qp_init_rd_atom:\t\t%d\n", verbs.MaxRdAtomic)
	fmt.Fprintf(&b, "\tatomic_cap:\t\t\tATOMIC_HCA (1)\n")
	fmt.Fprintf(&b, "\t\tport:\t1\n")
	fmt.Fprintf(&b, "\t\t\tstate:\t\t\t%s\n", state)
	fmt.Fprintf(&b, "\t\t\tmax_mtu:\t\t4096 (5)\n")
	fmt.Fprintf(&b, "\t\t\tactive_mtu:\t\t%d (%d)\n", p.activeMTU, int(verbs.MTUFromBytes(p.activeMTU)))
	fmt.Fprintf(&b, "\t\t\tsm_lid:\t\t\t0\n\t\t\tport_lid:\t\t0\n\t\t\tport_lmc:\t\t0x00\n")
	fmt.Fprintf(&b, "\t\t\tmax_msg_sz:\t\t%#x\n", verbs.MaxMsgSize)
	fmt.Fprintf(&b, "\t\t\tlink_layer:\t\tEthernet\n")
	fmt.Fprintf(&b, "\t\t\tphys_state:\t\t%s\n", phys)
	fmt.Fprintf(&b, "\t\t\tnetdev_mtu:\t\t%d\n", p.link.MTU)
	fmt.Fprintf(&b, "\t\t\trx_queues:\t\t%d\n", p.link.NumRXQueues)
	fmt.Fprintf(&b, "\t\t\tdatapath:\t\t%s\n", p.datapath)
	for i, g := range p.gids {
		fmt.Fprintf(&b, "\t\t\tGID[%3d]:\t\t%s, RoCE v2\n", i, formatGID(g))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// formatGUID prints a GUID as ibv_devinfo does: four groups of four hex digits.
func formatGUID(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// formatGID prints a GID as ibv_devinfo does: IPv4-mapped ones as ::ffff:a.b.c.d,
// others as eight groups of four hex digits.
func formatGID(g nic.GID) string {
	if a := g.Addr(); a.Is4() {
		return "::ffff:" + a.String()
	}
	parts := make([]string, 8)
	for i := range parts {
		parts[i] = fmt.Sprintf("%02x%02x", g[2*i], g[2*i+1])
	}
	return strings.Join(parts, ":")
}
