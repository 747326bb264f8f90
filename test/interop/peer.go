package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/xdproce/xdproce/test/interop/proc"
)

const (
	netns      = "rxepeer"
	hostIface  = "rxhost0"
	hostAddr   = "198.18.0.2"
	vmDevice   = "rxe0"
	guestIface = "eth0"         // the VMs' data interface, which xdproce in a guest opens
	vmDir      = "/tmp/interop" // per-cell server files inside a VM
)

func vmAddr(i int) string { return "198.18.0." + strconv.Itoa(10+i) }

// rxePeer drives the rxe-peer script.
type rxePeer struct {
	script string
	logf   func(format string, args ...any) // verbose trace, may be a no-op
}

// run runs one rxe-peer subcommand bounded by timeout.
func (p *rxePeer) run(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	p.logf("$ %s %s", p.script, proc.ShellJoin(args))
	out, err := proc.Run(ctx, timeout, p.script, args...)
	if err != nil {
		return out, fmt.Errorf("rxe-peer %s: %w\n%s", strings.Join(args, " "), err, lastLines(out, 15))
	}
	return out, nil
}

// exec runs a shell command line in VM i with stdin from /dev/null. The VM
// side is killed after timeout too (rxe-peer exec -T), so nothing is left
// running in the guest when ssh is cut.
func (p *rxePeer) exec(ctx context.Context, timeout time.Duration, i int, shell string) (string, error) {
	secs := strconv.Itoa(int(timeout.Seconds()))
	p.logf("$ rxe-peer exec %d %s", i, shell)
	out, err := proc.Run(ctx, timeout+30*time.Second, p.script, "exec", "-n", "-T", secs, strconv.Itoa(i), shell)
	if proc.ExitCode(err) == 124 { // from timeout(1) in the VM
		err = fmt.Errorf("timed out after %v: %w", timeout, err)
	}
	if err != nil {
		return out, fmt.Errorf("vm%d: %s: %w", i, shell, err)
	}
	return out, nil
}

// vmServer is a stock perftest server running in the background in a VM.
// Its output, timeout pid and exit status go to files named after the cell.
type vmServer struct {
	peer *rxePeer
	vm   int
	base string // vmDir/cN: .log .pid .rc
	port int
	cmd  string
	// killed: finish found it still running after its grace and killed it.
	killed bool
}

func startVMServer(ctx context.Context, p *rxePeer, vm, n, port int, argv []string, timeout time.Duration) (*vmServer, error) {
	s := &vmServer{peer: p, vm: vm, base: fmt.Sprintf("%s/c%d", vmDir, n), port: port, cmd: proc.ShellJoin(argv)}
	// The subshell records the exit status; every fd is redirected so that
	// ssh returns at once (see "rxe-peer exec" in the README). No "&&" before
	// it: "a && (b) &" would background the whole list, holding ssh's stdout.
	line := fmt.Sprintf("mkdir -p %[1]s; rm -f %[2]s.*; "+
		"(timeout -k 5 %[3]d %[4]s & echo $! >%[2]s.pid; wait $!; echo $? >%[2]s.rc) >%[2]s.log 2>&1 </dev/null &",
		vmDir, s.base, int(timeout.Seconds()), s.cmd)
	if _, err := p.exec(ctx, 60*time.Second, vm, line); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	return s, nil
}

// waitReady polls until the server listens on its port; it fails early
// when the server already exited.
func (s *vmServer) waitReady(ctx context.Context, timeout time.Duration) error {
	return s.poll(ctx, timeout, fmt.Sprintf("ss -Hltn 'sport = :%d' | grep -q .", s.port))
}

// waitCMListen polls until the server's rdma_cm ID listens on its port, as
// rdma_rxe lists it ("link rxe0/- cm-idn 0 state LISTEN ps TCP pid 303
// comm rping src-addr 0.0.0.0:7001"): perftest -R, rping, ucmatose and
// udaddy have no TCP port, and a stock client refused (REJ, no listener)
// gives up.
func (s *vmServer) waitCMListen(ctx context.Context, timeout time.Duration) error {
	return s.poll(ctx, timeout, fmt.Sprintf("rdma resource show cm_id | grep -Eq 'state LISTEN .*src-addr [^ ]*:%d( |$)'", s.port))
}

// waitJoined waits until the VM's data interface is a member of group
// (rdma_cm's join on rxe makes the kernel join it: cma_igmp_send).
func (s *vmServer) waitJoined(ctx context.Context, group string, timeout time.Duration) error {
	return s.poll(ctx, timeout, fmt.Sprintf("ip maddr show dev %s | grep -Eq 'inet +%s( |$)'", guestIface, group))
}

// poll runs the shell test ready in the VM until it succeeds; it fails
// early when the server already exited.
func (s *vmServer) poll(ctx context.Context, timeout time.Duration, ready string) error {
	probe := fmt.Sprintf(`if [ -f %[1]s.rc ]; then echo EXITED; elif %[2]s; then echo LISTENING; fi`, s.base, ready)
	deadline := time.Now().Add(timeout)
	for {
		out, err := s.peer.exec(ctx, 30*time.Second, s.vm, probe)
		switch {
		case err != nil:
			return err
		case strings.Contains(out, "LISTENING"):
			return nil
		case strings.Contains(out, "EXITED"):
			return fmt.Errorf("server exited before listening on port %d", s.port)
		case time.Now().After(deadline):
			return fmt.Errorf("server not listening on port %d after %v", s.port, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// finish waits up to grace for the server to exit, kills it otherwise, and
// returns its output and exit status (-1 if it had to be killed).
func (s *vmServer) finish(ctx context.Context, grace time.Duration) (string, int, error) {
	const marker = "@@interop-rc="
	polls := int(grace / (500 * time.Millisecond))
	line := fmt.Sprintf(`i=0; while [ ! -f %[1]s.rc ] && [ $i -lt %[2]d ]; do sleep 0.5; i=$((i+1)); done
killed=
p=$(cat %[1]s.pid 2>/dev/null)
if [ ! -f %[1]s.rc ] && [ -n "$p" ]; then
  killed=1; kill $p 2>/dev/null; i=0
  while [ ! -f %[1]s.rc ] && [ $i -lt 20 ]; do sleep 0.5; i=$((i+1)); done
  pkill -KILL -P $p 2>/dev/null; kill -KILL $p 2>/dev/null
fi
cat %[1]s.log 2>/dev/null
echo; echo "%[3]s${killed:+killed}$(cat %[1]s.rc 2>/dev/null)"`, s.base, polls, marker)
	out, err := s.peer.exec(ctx, grace+60*time.Second, s.vm, line)
	if err != nil {
		return out, -1, fmt.Errorf("collect server output: %w", err)
	}
	i := strings.LastIndex(out, marker)
	if i < 0 {
		return out, -1, fmt.Errorf("collect server output: no exit status in %q", lastLines(out, 3))
	}
	status := strings.TrimSpace(out[i+len(marker):])
	out = strings.TrimSuffix(out[:i], "\n")
	if strings.HasPrefix(status, "killed") {
		s.killed = true
		return out, -1, fmt.Errorf("server still running %v after the client ended, killed", grace)
	}
	code, err := strconv.Atoi(status)
	if err != nil {
		return out, -1, fmt.Errorf("server exit status %q: %w", status, err)
	}
	if code == 124 {
		return out, code, fmt.Errorf("server timed out")
	}
	return out, code, nil
}

// lastLines returns the last n lines of s, for error messages.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
