package loader

import (
	"errors"
	"os/exec"
	"testing"
)

func TestLinkInfo(t *testing.T) {
	p := newPair(t, pairOpts{mtu: 4200, queues: 2})
	l := linkInfo(t, p.A, p.AName)
	if l.Name != p.AName || l.Index != p.AIndex || l.MTU != 4200 || l.MAC.String() != p.AMAC.String() ||
		l.NumRXQueues != 2 || l.NumTXQueues != 2 || !l.Up || l.OperState != "up" || l.XDPProgramID != 0 {
		t.Errorf("LinkInfo = %+v", l)
	}
	err := p.A.do(func() error {
		_, err := LinkInfo("xdpl-nosuchlnk")
		return err
	})
	if !errors.Is(err, ErrLinkNotFound) {
		t.Errorf("LinkInfo of a missing link: %v, want ErrLinkNotFound", err)
	}
}

// A veth made without queue counts (as `ip link add ... type veth`, and so
// rxe-peer's veth) allocates a queue per CPU but uses one; LinkInfo must
// count the one in use, or AF_XDP sockets would be bound to queues that do
// not exist.
func TestLinkInfoCountsActiveQueues(t *testing.T) {
	ns := newNS(t)
	name := shortName("xlq")
	if out, err := exec.Command("ip", "-n", ns.name, "link", "add", name, "type", "veth", "peer", "name", name+"p").CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v\n%s", err, out)
	}
	if l := linkInfo(t, ns, name); l.NumRXQueues != 1 {
		t.Errorf("NumRXQueues = %d, want the one queue veth uses", l.NumRXQueues)
	}
}
