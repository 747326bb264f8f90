package main

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/loader"
	"github.com/xdproce/xdproce/nic"
)

func TestWriteDevinfoMatchesRxeLayout(t *testing.T) {
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x18, 0x00, 0x01}
	gid0, err := nic.DefaultGID(mac)
	if err != nil {
		t.Fatal(err)
	}
	p := portInfo{
		link:      loader.Link{Name: "eth0", MAC: mac, MTU: 9000, OperState: "up", Up: true, NumRXQueues: 1},
		gids:      []nic.GID{gid0, nic.GIDFromAddr(netip.MustParseAddr("198.18.0.11"))},
		activeMTU: nic.ActiveMTU(9000),
	}
	var b strings.Builder
	if err := writeDevinfo(&b, p); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// The values the rxe peer VM 1 reports for the same MAC, address and MTU.
	for _, want := range []string{
		"node_guid:\t\t\t5054:00ff:fe18:0001",
		"state:\t\t\tPORT_ACTIVE (4)",
		"active_mtu:\t\t4096 (5)",
		"GID[  0]:\t\tfe80:0000:0000:0000:5054:00ff:fe18:0001, RoCE v2",
		"GID[  1]:\t\t::ffff:198.18.0.11, RoCE v2",
		"link_layer:\t\tEthernet",
		"max_qp_rd_atom:\t\t\t128",
		"max_msg_sz:\t\t0x80000000",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("devinfo output lacks %q:\n%s", want, out)
		}
	}
}

func TestWriteDevinfoDownLink(t *testing.T) {
	var b strings.Builder
	p := portInfo{link: loader.Link{Name: "v0", MTU: 1500, OperState: "down", Up: true}, activeMTU: nic.ActiveMTU(1500)}
	if err := writeDevinfo(&b, p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "PORT_DOWN (1)") || !strings.Contains(b.String(), "active_mtu:\t\t1024 (3)") {
		t.Errorf("unexpected output for a down link at MTU 1500:\n%s", b.String())
	}
}

func TestRunRejectsUnknownCommandAndMissingFlags(t *testing.T) {
	var out, errOut strings.Builder
	if code := run(t.Context(), []string{"nope"}, &out, &errOut); code != 2 {
		t.Errorf("unknown command: exit %d, want 2", code)
	}
	if code := run(t.Context(), []string{"devinfo"}, &out, &errOut); code != 2 {
		t.Errorf("devinfo without --dev: exit %d, want 2", code)
	}
	out.Reset()
	if code := run(t.Context(), []string{"version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "xdproce ") {
		t.Errorf("version: exit %d, output %q", code, out.String())
	}
}
