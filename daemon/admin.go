package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/uverbs"
)

// Status is what an operator sees of a running daemon: its device, the
// transport's and the port's counters (rxe's names, the XDP program's),
// the attached clients and every QP with its owner.
type Status struct {
	Ifname    string
	Device    uverbs.DeviceInfo
	Transport []uverbs.Counter
	Port      []uverbs.Counter
	Clients   []uverbs.Client
	QPs       []uverbs.QPInfo
	// CMIDs are the clients' rdma_cm IDs; CMConnections the connections
	// the device's CM holds, timewait included.
	CMIDs         []uverbs.CMIDStatus
	CMConnections uint32
}

// Query asks the daemon serving ifname for its Status (root or the
// daemon's user only: it names the other clients).
func Query(ctx context.Context, ifname string) (*Status, error) {
	c, err := ipc.Dial(ctx, ifname)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	st := &Status{Ifname: ifname}
	var fds []int
	if st.Device, _, fds, err = c.Hello(); err != nil {
		return nil, err
	}
	ipc.CloseAll(fds)
	d, err := c.CallNoFDs(uverbs.OpCounters, nil)
	if err != nil {
		return nil, err
	}
	st.Transport, st.Port = uverbs.GetCounters(d), uverbs.GetCounters(d)
	if err := d.End(); err != nil {
		return nil, err
	}
	// A reply holds what fits in a message: ask from where it ended.
	var cur uverbs.ListCursor
	for range maxListPages {
		if d, err = c.CallNoFDs(uverbs.OpList, cur.Put); err != nil {
			return nil, err
		}
		p := uverbs.GetListPage(d)
		if err := d.End(); err != nil {
			return nil, err
		}
		st.Clients, st.QPs, st.CMIDs = append(st.Clients, p.Clients...), append(st.QPs, p.QPs...), append(st.CMIDs, p.CMIDs...)
		st.CMConnections = p.CMConnections
		if !p.More {
			return st, nil
		}
		if len(p.Clients)+len(p.QPs)+len(p.CMIDs) == 0 {
			return nil, fmt.Errorf("daemon: a LIST reply with no entry and more to come")
		}
		cur.Clients += uint32(len(p.Clients))
		cur.QPs += uint32(len(p.QPs))
		cur.CMIDs += uint32(len(p.CMIDs))
	}
	return nil, fmt.Errorf("daemon: LIST longer than %d replies", maxListPages)
}

// maxListPages bounds a LIST: a page holds some 250 QPs, a device at most
// 4079 QPs, and the clients' shares bound their rdma_cm IDs.
const maxListPages = 1024

// Running lists the interfaces whose daemon listens in the calling
// thread's network namespace (the abstract sockets of its net/unix: the
// thread's, for /proc/net shows the main thread's namespace).
func Running() ([]string, error) {
	f, err := os.Open("/proc/thread-self/net/unix")
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	defer f.Close()
	prefix := ipc.SocketName("")
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// Num RefCount Protocol Flags Type St Inode Path; a listener's
		// flags have __SO_ACCEPTCON (0x10000).
		if len(fields) < 8 || fields[3] != "00010000" {
			continue
		}
		if name, ok := strings.CutPrefix(fields[7], prefix); ok {
			out = append(out, name)
		}
	}
	return out, errors.Join(sc.Err())
}
