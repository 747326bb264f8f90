package nic

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/internal/netns"
)

// kernelGroups reads, in the calling thread's namespace, the IPv4 groups
// the kernel holds on ifname (/proc/net/igmp, as hex of the address in
// memory order) and the MAC addresses in its filter (/proc/net/dev_mcast).
func kernelGroups(t *testing.T, ifname string) (igmp, macs string) {
	t.Helper()
	b, err := os.ReadFile("/proc/thread-self/net/igmp")
	if err != nil {
		t.Fatal(err)
	}
	igmp = string(b)
	b, err = os.ReadFile("/proc/thread-self/net/dev_mcast")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 5 && f[1] == ifname {
			macs += f[4] + " "
		}
	}
	return igmp, macs
}

// TestJoinGroupMembership: joining a group makes the kernel a member of it
// on the interface (it reports it to IGMP queriers) with the group's MAC
// address in the interface's filter, and the XDP program steers the
// group's address; leaving undoes all three, and Close leaves what is left.
func TestJoinGroupMembership(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: 1})
	h := topo.Hosts[0]
	g4, g6 := netip.MustParseAddr("239.1.2.3"), netip.MustParseAddr("ff0e::1:2")
	err := h.Do(func() error {
		p, err := Open(t.Context(), Config{Ifname: h.Link})
		if err != nil {
			return err
		}
		defer p.Close()
		if err := p.JoinGroup(netip.MustParseAddr("::ffff:239.1.2.3")); err != nil {
			return err
		}
		if err := p.JoinGroup(g6); err != nil {
			return err
		}
		if err := p.JoinGroup(g4); err == nil {
			t.Error("a second join of the same group succeeded")
		}
		if err := p.JoinGroup(netip.MustParseAddr("198.18.0.9")); err == nil {
			t.Error("a join of a unicast address succeeded")
		}
		igmp, macs := kernelGroups(t, h.Link)
		if !strings.Contains(igmp, "030201EF") || !strings.Contains(macs, "01005e010203") || !strings.Contains(macs, "333300010002") {
			t.Errorf("after the joins: igmp\n%s\nfilter %s", igmp, macs)
		}
		local, err := p.xdp.LocalAddrs()
		if err != nil {
			return err
		}
		if !slices.Contains(local, g4) || !slices.Contains(local, g6) {
			t.Errorf("XDP steers %v, without the groups", local)
		}
		if err := p.LeaveGroup(g4); err != nil {
			return err
		}
		igmp, macs = kernelGroups(t, h.Link)
		if strings.Contains(igmp, "030201EF") || strings.Contains(macs, "01005e010203") {
			t.Errorf("after the leave: igmp\n%s\nfilter %s", igmp, macs)
		}
		if local, _ := p.xdp.LocalAddrs(); slices.Contains(local, g4) {
			t.Errorf("XDP still steers %v after the leave", g4)
		}
		if err := p.Close(); err != nil {
			return err
		}
		if _, macs = kernelGroups(t, h.Link); strings.Contains(macs, "333300010002") {
			t.Errorf("after Close: filter %s", macs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
