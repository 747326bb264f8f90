module github.com/xdproce/xdproce

go 1.26.0

require (
	github.com/cilium/ebpf v0.22.0
	github.com/vishvananda/netlink v1.3.1
	github.com/vishvananda/netns v0.0.5
	golang.org/x/sys v0.49.0
)

tool github.com/cilium/ebpf/cmd/bpf2go
