package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be `xdproce run`'s discovery helper, as
// xdproce is: TestDiscoveryHelper runs it.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == discoveryHelper {
		err := enterDiscovery(os.Args[2:])
		fmt.Fprintln(os.Stderr, err)
		os.Exit(127)
	}
	os.Exit(m.Run())
}

func TestSysfsFormats(t *testing.T) {
	devs := []discoveredDevice{{Name: "xdp_e0", Ifname: "e0", Uverbs: 3, GUID: 0x0211_22ff_fe33_4455,
		GIDs: []string{"fe80::211:22ff:fe33:4455", "198.18.0.1"}}}
	fs, err := discoveryTree(devs)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]treeFile{}
	for _, f := range fs {
		got[f.path] = f
	}
	ib := "sys/class/infiniband/xdp_e0/"
	for path, want := range map[string]string{
		ib + "node_guid":                           "0211:22ff:fe33:4455\n",
		ib + "ports/1/gids/0":                      "fe80:0000:0000:0000:0211:22ff:fe33:4455\n",
		ib + "ports/1/gids/1":                      "0000:0000:0000:0000:0000:ffff:c612:0001\n",
		ib + "ports/1/gid_attrs/types/1":           "RoCE v2\n",
		ib + "ports/1/gid_attrs/ndevs/1":           "e0\n",
		"sys/class/infiniband_verbs/uverbs3/ibdev": "xdp_e0\n",
		"sys/class/infiniband_verbs/uverbs3/dev":   "231:195\n",
	} {
		if f, ok := got[path]; !ok || f.content != want {
			t.Errorf("%s = %q (present %v), want %q", path, f.content, ok, want)
		}
	}
	if f := got["dev/infiniband/uverbs3"]; f.dev == 0 {
		t.Error("no /dev/infiniband/uverbs3")
	}
	if f := got[ib+"device/net/e0"]; f.link != "/sys/class/net/e0" {
		t.Errorf("device/net/e0 links to %q", f.link)
	}
	if _, err := discoveryTree([]discoveredDevice{{Name: "xdp_e0", Ifname: "e0", GIDs: []string{"nonsense"}}}); err == nil {
		t.Error("a GID that is no address made a tree")
	}
	// Names from a daemon's socket name become paths: nothing that could leave the tree.
	for _, d := range []discoveredDevice{
		{Name: "xdp_../../etc", Ifname: "../../etc"},
		{Name: "xdp_..", Ifname: ".."},
		{Name: "../../etc", Ifname: "e0"},
		{Name: "xdp_e0", Ifname: "e0", Parent: "/etc"},
		{Name: "xdp_e0", Ifname: "e0", Uverbs: -1},
		{Name: "xdp_a_very_long_name", Ifname: "a_very_long_name"},
	} {
		if _, err := discoveryTree([]discoveredDevice{d}); err == nil {
			t.Errorf("%+v made a tree", d)
		}
	}
	if err := writeTree(t.TempDir(), []treeFile{{path: "../escape", content: "x"}}); err == nil {
		t.Error("writeTree wrote outside its root")
	}
}

// TestDiscoveryHelper runs a shell through the helper, as `xdproce run`
// does: the tree is there, with a device whose interface has a parent
// device linked to it; what /sys/class and /dev held is still there (a
// class, device nodes, the mounts below /dev); /sys/class is read-only;
// and none of it is seen outside.
func TestDiscoveryHelper(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mount namespaces need root")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	devs := []discoveredDevice{
		{Name: "xdp_v0", Ifname: "v0", Uverbs: 0, GUID: 1, GIDs: []string{"198.18.0.1"}},
		{Name: "xdp_p0", Ifname: "p0", Uverbs: 1, GUID: 2, GIDs: []string{"198.18.1.1"}, Parent: "/sys/devices/virtual/net/lo"},
	}
	script := strings.Join([]string{
		"cat /sys/class/infiniband/xdp_v0/ports/1/gids/0",
		"ls /sys/class/infiniband/xdp_v0/device/net",
		"readlink /sys/class/infiniband/xdp_p0/device",
		"cat /sys/class/infiniband_verbs/uverbs1/ibdev",
		"stat -c '%t:%T %a' /dev/infiniband/uverbs0 /dev/infiniband/uverbs1",
		"test -e /sys/class/net/lo && echo net",
		"stat -c %t:%T /dev/null",
		"echo x > /dev/null && echo null-writable",
		"grep -q ' /dev/pts ' /proc/self/mounts && echo pts",
		"touch /sys/class/new 2>/dev/null || echo read-only",
		"env | grep -c " + discoveryEnv + " || true",
	}, "\n")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd, err := discoveryCommand(ctx, exe, devs, []string{"sh", "-ec", script})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, &out)
	}
	want := strings.Join([]string{
		"0000:0000:0000:0000:0000:ffff:c612:0001",
		"v0",
		"/sys/devices/virtual/net/lo",
		"xdp_p0",
		"e7:c0 666", "e7:c1 666",
		"net",
		"1:3",
		"null-writable",
		"pts",
		"read-only",
		"0",
	}, "\n") + "\n"
	if out.String() != want {
		t.Errorf("inside the helper:\n%s\nwant:\n%s", &out, want)
	}
	for _, p := range []string{"/sys/class/infiniband", "/dev/infiniband"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists outside", p)
		}
	}
}
