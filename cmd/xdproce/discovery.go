package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/verbs"
)

// Discovery: programs find RDMA devices not only through
// ibv_get_device_list but in the kernel's files (UCX wants
// /dev/infiniband/<dev_name> to be a character device it may open; pyverbs'
// tests look for the device's netdev in /sys/class/infiniband/<dev>/device/net;
// libfabric and rdma-core's tools read ports, GIDs and GID types there).
// With no kernel RDMA stack those files do not exist, so `xdproce run` gives
// its program a mount namespace of its own in which /sys/class and /dev are
// tmpfs copies of the real ones (every entry bind-mounted, nothing hidden)
// plus the devices of the daemons it can reach. See docs/discovery.md.

// discoveryHelper is the hidden first argument with which `xdproce run`
// re-executes itself in a new mount namespace: Go cannot run code between
// fork and exec, and the mounts must be made in the program's namespace.
const discoveryHelper = "__discovery-exec"

// discoveryEnv carries the devices to the helper; the helper removes it
// before it executes the program.
const discoveryEnv = "XDPROCE_DISCOVERY"

// The character devices the tree names: the kernel's uverbs major and its
// first minor (drivers/infiniband/core/uverbs_main.c). Nothing serves them:
// opening one fails (ENXIO), as it should, for the library never does.
const (
	uverbsMajor     = 231
	uverbsBaseMinor = 192
)

// A discoveredDevice is what the tree says of one daemon's device.
type discoveredDevice struct {
	Name      string   `json:"name"`   // xdp_IF, the ibv_device name
	Ifname    string   `json:"ifname"` // its network interface
	Uverbs    int      `json:"uverbs"` // N of uverbsN, its dev_name
	GUID      uint64   `json:"guid"`
	ActiveMTU int      `json:"active_mtu"` // enum ibv_mtu
	GIDs      []string `json:"gids"`       // port 1's table, as addresses
	// Parent is the interface's own device directory in sysfs (a PCI
	// function, say), empty for a virtual interface (veth).
	Parent string `json:"parent,omitempty"`
}

// discoverDevices asks each daemon of names for its device's facts; a
// daemon that cannot be attached (not trusted, going away) is left out and
// reported on warn. The devices are numbered in the order of their names.
func discoverDevices(ctx context.Context, names []string, warn io.Writer) []discoveredDevice {
	names = slices.Sorted(slices.Values(names))
	var out []discoveredDevice
	for _, ifname := range names {
		if !validIfname(ifname) {
			fmt.Fprintf(warn, "xdproce run: %q is not in /sys/class/infiniband: not an interface name\n", ifname)
			continue
		}
		d, err := describeDevice(ctx, ifname)
		if err != nil {
			fmt.Fprintf(warn, "xdproce run: %s is not in /sys/class/infiniband: %v\n", ifname, err)
			continue
		}
		d.Uverbs = len(out)
		out = append(out, d)
	}
	return out
}

// describeDevice attaches to the daemon of ifname for the facts the tree
// shows of its device.
func describeDevice(ctx context.Context, ifname string) (discoveredDevice, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	dev, err := verbs.Dial(ctx, ifname)
	if err != nil {
		return discoveredDevice{}, err
	}
	defer dev.Close()
	port := dev.QueryPort()
	d := discoveredDevice{Name: "xdp_" + ifname, Ifname: ifname, GUID: verbs.NodeGUID(dev.MAC()), ActiveMTU: int(port.ActiveMTU)}
	for i := range port.GIDTblLen {
		g, err := dev.QueryGID(i)
		if err != nil {
			return discoveredDevice{}, fmt.Errorf("GID %d: %w", i, err)
		}
		d.GIDs = append(d.GIDs, g.String())
	}
	if p, err := filepath.EvalSymlinks(filepath.Join("/sys/class/net", ifname, "device")); err == nil {
		d.Parent = p
	}
	return d, nil
}

// sysfsGID formats a GID as the kernel's gids/N files do: eight groups of
// four hex digits, IPv4 as ::ffff:a.b.c.d.
func sysfsGID(a netip.Addr) string {
	b := a.As16()
	parts := make([]string, 8)
	for i := range parts {
		parts[i] = fmt.Sprintf("%02x%02x", b[2*i], b[2*i+1])
	}
	return strings.Join(parts, ":")
}

// sysfsGUID formats a GUID as node_guid does.
func sysfsGUID(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// A treeFile is one entry of the discovery tree, relative to the root it
// is written under: a file with content, a symlink, or a character device.
type treeFile struct {
	path    string
	content string // a regular file's, with the kernel's trailing newline
	link    string // if set, a symlink to this
	dev     uint64 // if set, a character device with this number
}

// validIfname reports whether s can name a network interface (as the
// kernel's dev_valid_name): it becomes a path component of the tree.
func validIfname(s string) bool {
	return s != "" && len(s) < 16 && s != "." && s != ".." && !strings.ContainsAny(s, "/: \t\n")
}

// discoveryTree lists the entries that describe devs below the roots
// sys/class (the kernel's /sys/class) and dev (its /dev): as the kernel
// lays out an rxe device, with the values xdproce's libibverbs reports.
// Names come from daemons' socket names: one that is not an interface's
// is refused, so no entry lands outside its directory.
func discoveryTree(devs []discoveredDevice) ([]treeFile, error) {
	file := func(path, content string) treeFile { return treeFile{path: path, content: content + "\n"} }
	fs := []treeFile{file("sys/class/infiniband_verbs/abi_version", "6")}
	for _, d := range devs {
		if !validIfname(d.Ifname) || d.Name != "xdp_"+d.Ifname || d.Uverbs < 0 || d.Uverbs > 63 ||
			(d.Parent != "" && !strings.HasPrefix(filepath.Clean(d.Parent), "/sys/")) {
			return nil, fmt.Errorf("discovery tree: not a device: %+v", d)
		}
		ib := "sys/class/infiniband/" + d.Name
		uv := fmt.Sprintf("uverbs%d", d.Uverbs)
		guid := sysfsGUID(d.GUID)
		fs = append(fs,
			file(ib+"/node_type", "1: CA"),
			file(ib+"/node_guid", guid),
			file(ib+"/sys_image_guid", guid),
			file(ib+"/node_desc", "xdproce "+d.Ifname),
			file(ib+"/fw_ver", "xdproce"),
			file(ib+"/hw_rev", "0"),
			file(ib+"/hca_type", "xdproce"),
			file(ib+"/board_id", "xdproce"),
			file(ib+"/ports/1/state", "4: ACTIVE"),
			file(ib+"/ports/1/phys_state", "5: LinkUp"),
			file(ib+"/ports/1/link_layer", "Ethernet"),
			file(ib+"/ports/1/rate", "2.5 Gb/sec (1X SDR)"), // active width 1X, speed SDR: ibv_query_port's
			file(ib+"/ports/1/lid", "0x0"),
			file(ib+"/ports/1/sm_lid", "0x0"),
			file(ib+"/ports/1/lid_mask_count", "0"),
			file(ib+"/ports/1/sm_sl", "0"),
			file(ib+"/ports/1/cap_mask", "0x00010000"), // IB_PORT_CM_SUP
			file(ib+"/ports/1/pkeys/0", "0xffff"),
			file("sys/class/infiniband_verbs/"+uv+"/ibdev", d.Name),
			file("sys/class/infiniband_verbs/"+uv+"/abi_version", "1"),
			file("sys/class/infiniband_verbs/"+uv+"/dev", fmt.Sprintf("%d:%d", uverbsMajor, uverbsBaseMinor+d.Uverbs)),
			treeFile{path: "dev/infiniband/" + uv, dev: unix.Mkdev(uverbsMajor, uint32(uverbsBaseMinor+d.Uverbs))},
		)
		for i, s := range d.GIDs {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("%s: GID %d: %w", d.Name, i, err)
			}
			n := strconv.Itoa(i)
			fs = append(fs,
				file(ib+"/ports/1/gids/"+n, sysfsGID(a)),
				file(ib+"/ports/1/gid_attrs/types/"+n, "RoCE v2"),
				file(ib+"/ports/1/gid_attrs/ndevs/"+n, d.Ifname))
		}
		// device: the netdev's parent (its numa_node and net/ are the
		// real ones); a virtual interface has none, so one is made with
		// what readers look for in it.
		if d.Parent != "" {
			fs = append(fs, treeFile{path: ib + "/device", link: d.Parent})
		} else {
			fs = append(fs,
				file(ib+"/device/numa_node", "-1"),
				treeFile{path: ib + "/device/net/" + d.Ifname, link: "/sys/class/net/" + d.Ifname})
		}
		fs = append(fs, treeFile{path: "sys/class/infiniband_verbs/" + uv + "/device", link: "../../infiniband/" + d.Name + "/device"})
	}
	return fs, nil
}

// writeTree writes the entries under root.
func writeTree(root string, fs []treeFile) error {
	for _, f := range fs {
		if !filepath.IsLocal(f.path) {
			return fmt.Errorf("discovery tree: %q is outside it", f.path)
		}
		p := filepath.Join(root, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		var err error
		switch {
		case f.link != "":
			err = os.Symlink(f.link, p)
		case f.dev != 0:
			// 0666 as rdma-core's udev rule makes uverbs: UCX checks access(R_OK|W_OK).
			if err = unix.Mknod(p, unix.S_IFCHR|0o666, int(f.dev)); err == nil {
				err = os.Chmod(p, 0o666) // past the umask
			}
		default:
			err = os.WriteFile(p, []byte(f.content), 0o444)
		}
		if err != nil {
			return fmt.Errorf("discovery tree: %w", err)
		}
	}
	return nil
}

// discoveryCommand is how `xdproce run` runs argv with the tree: itself,
// as the helper, in a new mount namespace (Go makes its mounts private to
// it), told the devices through the environment.
func discoveryCommand(ctx context.Context, exe string, devs []discoveredDevice, argv []string) (*exec.Cmd, error) {
	spec, err := json.Marshal(devs)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe, append([]string{discoveryHelper, "--"}, argv...)...)
	cmd.Env = append(os.Environ(), discoveryEnv+"="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: unix.CLONE_NEWNS}
	return cmd, nil
}

// enterDiscovery is the helper: in its new mount namespace it lays /sys/class
// and /dev over with copies that hold the tree, then becomes argv (after --).
// A tree it cannot make is reported on stderr and the program runs without
// it, as outside `xdproce run`. It returns only if it cannot run argv.
func enterDiscovery(args []string) error {
	if len(args) < 2 || args[0] != "--" {
		return errors.New("discovery helper: want -- CMD [ARGS]")
	}
	argv := args[1:]
	if err := mountDiscovery(os.Getenv(discoveryEnv)); err != nil {
		fmt.Fprintf(os.Stderr, "xdproce run: %s runs without /sys/class/infiniband: %v\n", argv[0], err)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, discoveryEnv+"=") })
	return unix.Exec(path, argv, env)
}

// mountDiscovery makes the tree of the devices spec describes (JSON).
func mountDiscovery(spec string) error {
	var devs []discoveredDevice
	if err := json.Unmarshal([]byte(spec), &devs); err != nil {
		return fmt.Errorf("discovery helper: %s: %w", discoveryEnv, err)
	}
	fs, err := discoveryTree(devs)
	if err != nil {
		return err
	}
	var sys, dev []treeFile
	for _, f := range fs {
		if p, ok := strings.CutPrefix(f.path, "sys/class/"); ok {
			f.path = p
			sys = append(sys, f)
		} else if p, ok := strings.CutPrefix(f.path, "dev/"); ok {
			f.path = p
			dev = append(dev, f)
		}
	}
	if err := shadow("/sys/class", sys, true); err != nil {
		return err
	}
	return shadow("/dev", dev, false)
}

// shadow mounts a tmpfs over dir that holds every entry dir held (each
// directory and file bind-mounted from the original, so mounts below come
// along; symlinks and device nodes copied) and the entries add (relative to
// dir), read-only after if readOnly. Only the caller's mount namespace sees
// it.
func shadow(dir string, add []treeFile, readOnly bool) error {
	old, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	defer old.Close()
	ents, err := old.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("discovery: %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(old.Fd()), &st); err != nil {
		return fmt.Errorf("discovery: %s: %w", dir, err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID, fmt.Sprintf("mode=%o", st.Mode&0o7777)); err != nil {
		return fmt.Errorf("discovery: a tmpfs over %s: %w", dir, err)
	}
	// The original stays reachable through the descriptor opened before.
	from := fmt.Sprintf("/proc/self/fd/%d", old.Fd())
	for _, e := range ents {
		if err := carry(filepath.Join(from, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("discovery: %s: %w", dir, err)
		}
	}
	if err := writeTree(dir, add); err != nil {
		return err
	}
	if readOnly {
		if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID, ""); err != nil {
			return fmt.Errorf("discovery: %s read-only: %w", dir, err)
		}
	}
	return nil
}

// carry puts the entry src at dst, which does not exist yet: a symlink or
// a device node as a copy, anything else (directories with the mounts
// below them, files, sockets) bind-mounted.
func carry(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case unix.S_IFCHR, unix.S_IFBLK:
		if err := unix.Mknod(dst, st.Mode, int(st.Rdev)); err != nil {
			return err
		}
		if err := unix.Chmod(dst, st.Mode&0o7777); err != nil { // past the umask
			return err
		}
		return unix.Lchown(dst, int(st.Uid), int(st.Gid))
	case unix.S_IFDIR:
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
	default:
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	}
	return unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, "")
}
