package wire

import (
	"net/netip"
	"testing"
)

// The mappings the kernel's ip_eth_mc_map and ipv6_eth_mc_map make (RFC 1112
// §6.4, RFC 2464 §7), on the GID forms rdma_cm gives a RoCEv2 group.
func TestMulticastMAC(t *testing.T) {
	for _, c := range []struct {
		gid  string
		want string
	}{
		{"::ffff:239.1.2.3", "01:00:5e:01:02:03"},
		{"239.129.2.3", "01:00:5e:01:02:03"}, // the 24th bit is not mapped
		{"::ffff:224.0.0.251", "01:00:5e:00:00:fb"},
		{"ff0e::ffff:239.1.2.3", "33:33:ef:01:02:03"},
		{"ff12::8000:1:2", "33:33:00:01:00:02"},
		{"::ffff:198.18.0.1", ""},
		{"2001:db8::1", ""},
	} {
		got := MulticastMAC(netip.MustParseAddr(c.gid))
		if got.String() != c.want {
			t.Errorf("MulticastMAC(%s) = %q, want %q", c.gid, got, c.want)
		}
		if IsMulticastGID(netip.MustParseAddr(c.gid)) != (c.want != "") {
			t.Errorf("IsMulticastGID(%s) = %v", c.gid, !(c.want != ""))
		}
	}
}
