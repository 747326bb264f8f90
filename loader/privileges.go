package loader

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// checkPrivileges fails with an error wrapping EPERM unless the calling
// thread can load and attach XDP programs: CAP_NET_ADMIN plus CAP_BPF (or
// CAP_SYS_ADMIN, which implies it). Capabilities are per thread, so this is
// what the bpf() and netlink calls that follow will be checked against.
func checkPrivileges() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("loader: read capabilities: %w", err)
	}
	has := func(c int) bool { return data[c/32].Effective&(1<<(uint(c)%32)) != 0 }
	var missing []string
	if !has(unix.CAP_NET_ADMIN) {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if !has(unix.CAP_BPF) && !has(unix.CAP_SYS_ADMIN) {
		missing = append(missing, "CAP_BPF")
	}
	if len(missing) > 0 {
		return fmt.Errorf("loader: attaching XDP needs root or CAP_BPF and CAP_NET_ADMIN (missing %s): %w",
			strings.Join(missing, ", "), unix.EPERM)
	}
	return nil
}
