package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/xdproce/xdproce/daemon"
	"github.com/xdproce/xdproce/nic"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// daemonsOf is the interfaces named, or every one whose daemon runs here.
func daemonsOf(dev string) ([]string, error) {
	if dev != "" {
		return []string{dev}, nil
	}
	names, err := daemon.Running()
	if err == nil && len(names) == 0 {
		err = fmt.Errorf("no xdproce daemon runs in this network namespace (xdproce up -d IFACE)")
	}
	return names, err
}

// statsFlags declares stats' flags; its action prints a daemon's counters as `rdma statistic show link` does,
// the XDP program's beside them, and with --qp one QP's transport state.
func statsFlags(fs *flag.FlagSet) action {
	dev := fs.String("d", "", "interface whose daemon to ask (default: every daemon of this namespace)")
	fs.StringVar(dev, "dev", "", "same as -d")
	qpn := fs.Int("qp", -1, "also show this QP (its number)")
	watch := fs.Duration("watch", 0, "print again at this interval until interrupted")
	return func(ctx context.Context, std stdio, _ []string) error {
		stdout := std.out
		names, err := daemonsOf(*dev)
		if err != nil {
			return err
		}
		for {
			for _, n := range names {
				st, err := query(ctx, n)
				if err != nil {
					return err
				}
				if *watch > 0 {
					fmt.Fprintf(stdout, "%s\n", time.Now().Format(time.RFC3339Nano))
				}
				fmt.Fprintln(stdout, counterLine("link "+st.Device.Name+"/1", st.Transport))
				fmt.Fprintln(stdout, counterLine("xdp "+st.Device.Name, st.Port))
				if *qpn >= 0 {
					found := false
					for _, q := range st.QPs {
						if q.QPN == uint32(*qpn) {
							fmt.Fprintln(stdout, qpLine(st, q))
							found = true
						}
					}
					if !found {
						return fmt.Errorf("%s has no QP %d", st.Device.Name, *qpn)
					}
				}
			}
			if *watch <= 0 {
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(*watch):
			}
		}
	}
}

// listFlags declares list's flags; its action prints the daemons' devices, clients and QPs, as `rdma dev` and
// `rdma resource show qp` do.
func listFlags(fs *flag.FlagSet) action {
	dev := fs.String("d", "", "interface whose daemon to ask (default: every daemon of this namespace)")
	fs.StringVar(dev, "dev", "", "same as -d")
	return func(ctx context.Context, std stdio, _ []string) error {
		stdout := std.out
		names, err := daemonsOf(*dev)
		if err != nil {
			return err
		}
		for _, n := range names {
			st, err := query(ctx, n)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "dev %s netdev %s engines %d datapath %q\n", st.Device.Name, n, st.Device.Engines, st.Device.DataPath)
			for _, c := range st.Clients {
				fmt.Fprintf(stdout, "client %s pid %d comm %s uid %d pd %d mr %d cq %d qp %d\n",
					st.Device.Name, c.PID, c.Comm, c.UID, c.PDs, c.MRs, c.CQs, c.QPs)
			}
			for _, q := range st.QPs {
				fmt.Fprintln(stdout, qpLine(st, q))
			}
			for _, c := range st.CMIDs {
				fmt.Fprintln(stdout, cmIDLine(st, c))
			}
			fmt.Fprintf(stdout, "cm %s connections %d\n", st.Device.Name, st.CMConnections)
		}
		return nil
	}
}

// cmIDLine is an rdma_cm ID as `rdma resource show cm_id` shows one.
func cmIDLine(st *daemon.Status, c uverbs.CMIDStatus) string {
	ps := map[uint16]string{0x0106: "TCP", 0x0111: "UDP", 0x013f: "IB"}[c.PortSpace]
	comm := "-"
	for _, cl := range st.Clients {
		if cl.PID == c.OwnerPID {
			comm = cl.Comm
		}
	}
	addr := func(a uverbs.CMAddr) string {
		if a.Family == 0 {
			return fmt.Sprintf("-:%d", a.Port)
		}
		ip := netip.AddrFrom16(a.IP)
		if a.Family == 4 {
			ip = ip.Unmap()
		}
		return netip.AddrPortFrom(ip, a.Port).String()
	}
	typ := "RC"
	if ps == "UDP" {
		typ = "UD"
	}
	return fmt.Sprintf("cm_id link %s/1 lqpn %d qp-type %s state %s ps %s pid %d comm %s src-addr %s dst-addr %s",
		st.Device.Name, c.QPN, typ, c.State, ps, c.OwnerPID, comm, addr(c.Src), addr(c.Dst))
}

func query(ctx context.Context, ifname string) (*daemon.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := daemon.Query(ctx, ifname)
	if err != nil {
		return nil, fmt.Errorf("the daemon of %s (%s): %w", ifname, nic.DeviceName(ifname), err)
	}
	return st, nil
}

func counterLine(head string, cs []uverbs.Counter) string {
	var b strings.Builder
	b.WriteString(head)
	for _, c := range cs {
		fmt.Fprintf(&b, " %s %d", c.Name, c.Value)
	}
	return b.String()
}

// qpLine is one QP in `rdma resource show qp`'s words, and its owner.
func qpLine(st *daemon.Status, q uverbs.QPInfo) string {
	typ := map[verbs.QPType]string{verbs.QPTypeRC: "RC", verbs.QPTypeUC: "UC", verbs.QPTypeUD: "UD"}[verbs.QPType(q.Type)]
	peer := "-"
	if q.Peer != ([16]byte{}) {
		peer = netip.AddrFrom16(q.Peer).Unmap().String()
	}
	comm := "-"
	for _, c := range st.Clients {
		if c.PID == q.OwnerPID {
			comm = c.Comm
		}
	}
	if q.QPN == verbs.GSIQPN {
		// QP1 is the daemon's own, carrying the connection manager's MADs
		// (rxe lists it as ib_core's).
		typ, comm = "GSI", "[rdmacm]"
	}
	return fmt.Sprintf("link %s/1 lqpn %d rqpn %d type %s state %v sq-psn %#x comp-psn %#x rq-psn %#x sq %d rq %d timeouts %d queue %d peer %s pid %d comm %s",
		st.Device.Name, q.QPN, q.DestQPN, typ, verbs.QPState(q.State), q.SQPSN, q.CompPSN, q.EPSN, q.SendQueued, q.RecvQueued,
		q.Timeouts, q.Queue, peer, q.OwnerPID, comm)
}
