package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/verbs"
)

// runInTree runs `xdproce run -- argv` in h (its daemon already up) and
// returns what it printed; a failure is fatal.
func runInTree(t *testing.T, bin, lib string, h *netns.Host, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := runStock(ctx, bin, lib, h, false, argv...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	if err := h.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("xdproce run -- %s: %v\n%s", strings.Join(argv, " "), err, &out)
	}
	return out.String()
}

// gidFile is a GID as the kernel's ports/1/gids/N files print it.
func gidFile(b [16]byte) string {
	var parts []string
	for i := 0; i < 16; i += 2 {
		parts = append(parts, fmt.Sprintf("%02x%02x", b[i], b[i+1]))
	}
	return strings.Join(parts, ":")
}

// TestDiscoveryTree reads, inside `xdproce run`, the files programs
// discover RDMA devices by: the device's sysfs directory (node GUID, port
// state and link layer, every GID with its type and netdev, device/net),
// its uverbs entry and character device, all with the daemon's values; the
// rest of /sys/class and /dev still there; and nothing of it outside.
func TestDiscoveryTree(t *testing.T) {
	netns.RequireRoot(t)
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 1500, Queues: 1})
	a := topo.Hosts[0]
	bin := buildCLI(t)
	daemonUp(t, bin, a)

	// What the daemon itself says.
	var want []string
	var guid uint64
	if err := a.Do(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := verbs.Dial(ctx, a.Link)
		if err != nil {
			return err
		}
		defer d.Close()
		guid = verbs.NodeGUID(d.MAC())
		for i := range d.QueryPort().GIDTblLen {
			g, err := d.QueryGID(i)
			if err != nil {
				return err
			}
			want = append(want, gidFile(g.As16()))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(want) < 2 {
		t.Fatalf("the daemon has %d GIDs, want the link-local and the IPv4 one", len(want))
	}

	dev := "xdp_" + a.Link
	ib := "/sys/class/infiniband/" + dev
	script := []string{
		"cat " + ib + "/node_guid " + ib + "/node_type " + ib + "/ports/1/state " + ib + "/ports/1/phys_state " + ib + "/ports/1/link_layer",
		"ls " + ib + "/device/net",
		"cat " + ib + "/device/numa_node",
		"cat /sys/class/infiniband_verbs/uverbs0/ibdev /sys/class/infiniband_verbs/abi_version",
		"stat -c '%F %t:%T %a' /dev/infiniband/uverbs0",
	}
	for i := range want {
		script = append(script, fmt.Sprintf("echo gid %d $(cat %s/ports/1/gids/%d) $(cat %s/ports/1/gid_attrs/ndevs/%d) $(cat '%s/ports/1/gid_attrs/types/%d')", i, ib, i, ib, i, ib, i))
	}
	// The rest is still there: another class, a device node, the mounts below /dev.
	script = append(script, "test -e /sys/class/net/lo && echo net-class", "echo x > /dev/null && echo dev-null", "test -d /dev/pts && echo dev-pts")
	out := runInTree(t, bin, lib, a, "sh", "-ec", strings.Join(script, "\n"))

	g := fmt.Sprintf("%04x:%04x:%04x:%04x", guid>>48, guid>>32&0xffff, guid>>16&0xffff, guid&0xffff)
	lines := []string{g, "1: CA", "4: ACTIVE", "5: LinkUp", "Ethernet", a.Link, "-1", dev, "6",
		"character special file e7:c0 666"}
	for i, w := range want {
		lines = append(lines, fmt.Sprintf("gid %d %s %s RoCE v2", i, w, a.Link))
	}
	lines = append(lines, "net-class", "dev-null", "dev-pts")
	if got := strings.Split(strings.TrimSpace(out), "\n"); strings.Join(got, "\n") != strings.Join(lines, "\n") {
		t.Errorf("inside xdproce run:\n%s\nwant:\n%s", out, strings.Join(lines, "\n"))
	}

	// Only the program's mount namespace had the tree.
	for _, p := range []string{"/sys/class/infiniband", "/sys/class/infiniband_verbs", "/dev/infiniband"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists outside xdproce run", p)
		}
	}
}

// renameLink gives h's link the name name: UCX keeps at most 15
// characters of a device's name (UCT_MD_NAME_MAX) and then finds no
// device of that name, so xdp_IFACE needs an IFACE of at most 11, which
// the harness's names are not.
func renameLink(t *testing.T, h *netns.Host, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"link", "set", "dev", h.Link, "down"},
		{"link", "set", "dev", h.Link, "name", name},
		{"link", "set", "dev", name, "up"},
	} {
		if _, err := h.Exec(ctx, "ip", args...); err != nil {
			t.Fatal(err)
		}
	}
	h.Link = name
}

// transportRow is a transport and its device in ucx_info -d.
var transportRow = regexp.MustCompile(`(?m)^#\s+Transport: (\S+)\n#\s+Device: (\S+)`)

// TestUCXInfoListsDevice: UCX's ucx_info -d lists the device with rc_verbs
// and ud_verbs (UCX keeps a device only if /dev/infiniband/<dev_name> is
// a character device it may open).
func TestUCXInfoListsDevice(t *testing.T) {
	netns.RequireRoot(t)
	requireStock(t, "ucx_info")
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 1500, Queues: 1})
	a := topo.Hosts[0]
	renameLink(t, a, "ucx0")
	bin := buildCLI(t)
	daemonUp(t, bin, a)
	out := runInTree(t, bin, lib, a, "ucx_info", "-d")
	found := map[string]bool{}
	for _, m := range transportRow.FindAllStringSubmatch(out, -1) {
		if m[2] == "xdp_"+a.Link+":1" {
			found[m[1]] = true
		}
	}
	for _, tl := range []string{"rc_verbs", "ud_verbs"} {
		if !found[tl] {
			t.Errorf("ucx_info -d lists no %s on xdp_%s:1:\n%s", tl, a.Link, out)
		}
	}
}

// TestLibfabricInfoListsDevice: libfabric's fi_info -p verbs lists the
// device as a domain with MSG endpoints (RC over rdma_cm) and a -dgram
// domain with DGRAM endpoints (UD).
func TestLibfabricInfoListsDevice(t *testing.T) {
	netns.RequireRoot(t)
	requireStock(t, "fi_info")
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 1500, Queues: 1})
	a := topo.Hosts[0]
	bin := buildCLI(t)
	daemonUp(t, bin, a)
	out := runInTree(t, bin, lib, a, "fi_info", "-p", "verbs")
	dom := "xdp_" + a.Link
	for _, want := range []string{
		"domain: " + dom + "\n    version: [0-9.]+\n    type: FI_EP_MSG\n    protocol: FI_PROTO_RDMA_CM_IB_RC",
		"domain: " + dom + "-dgram\n    version: [0-9.]+\n    type: FI_EP_DGRAM\n    protocol: FI_PROTO_IB_UD",
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("fi_info -p verbs has no %q:\n%s", want, out)
		}
	}
}
