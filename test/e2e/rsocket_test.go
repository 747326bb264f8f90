package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
)

// rstreamResult matches a result line of rstream or riostream: the test's
// name, then its transfer size, count, iterations, total bytes and time.
var rstreamResult = regexp.MustCompile(`(?m)^\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+[0-9.]+s\s+[0-9.]+\s+[0-9.]+$`)

// TestStockRsockets runs rdmacm-utils' rsocket programs, compiled against
// rdma-core and unmodified, on xdproce's librdmacm.so.1 between the daemons
// of two namespaces: rstream and riostream with several transfer sizes,
// blocking, non-blocking and rpoll-driven (-T b, n, a), the data verified
// (-T v); rcopy; and an ordinary TCP program under Debian's librspreload.so.
func TestStockRsockets(t *testing.T) {
	netns.RequireRoot(t)
	requireStock(t, "rstream", "riostream", "rcopy")
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	daemonUp(t, bin, a)
	daemonUp(t, bin, b)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bs := b.Addr.String()

	for _, c := range []struct {
		name string
		prog string
		opts []string
	}{
		{"rstream 1000B verify", "rstream", []string{"-S", "1000", "-C", "2000", "-T", "v"}},
		{"rstream 64KiB blocking verify", "rstream", []string{"-S", "65536", "-C", "300", "-T", "b", "-T", "v"}},
		{"rstream 1MiB rpoll verify", "rstream", []string{"-S", "1048576", "-C", "30", "-T", "a", "-T", "v"}},
		{"rstream 64B nonblocking inline 0", "rstream", []string{"-S", "64", "-C", "3000", "-T", "n", "-i", "0"}},
		{"rstream 100KiB small buffers", "rstream", []string{"-S", "100000", "-C", "100", "-B", "8192", "-T", "v"}},
		{"rstream keepalive", "rstream", []string{"-S", "4096", "-C", "100", "-k", "1"}},
		{"riostream 1000B verify", "riostream", []string{"-S", "1000", "-C", "1000", "-T", "v"}},
		{"riostream 64KiB blocking verify", "riostream", []string{"-S", "65536", "-C", "200", "-T", "b", "-T", "v"}},
		{"riostream 1MiB rpoll verify", "riostream", []string{"-S", "1048576", "-C", "20", "-T", "a", "-T", "v"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, cli := stockPair(t, ctx, lib, b, append([]string{c.prog, "-b", bs}, c.opts...),
				a, append([]string{c.prog, "-s", bs}, c.opts...), false)
			for _, out := range []string{srv, cli} {
				if !rstreamResult.MatchString(out) || strings.Contains(out, "rsocket") {
					t.Fatalf("%s: no result line, or an error:\nclient:\n%s\nserver:\n%s", c.prog, cli, srv)
				}
			}
		})
	}
}
