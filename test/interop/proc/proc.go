package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxOutput caps what is kept of a command's output (the tail is kept).
const maxOutput = 256 << 10

// TailBuffer is an io.Writer that keeps the last maxOutput bytes; it is safe
// to read while a background process still writes to it.
type TailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (t *TailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if over := t.buf.Len() - maxOutput; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *TailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}

// Command prepares name+args in its own process group, so that cancelling
// (timeout, Ctrl-C) reaches the children of a script too: SIGTERM to the
// group first, SIGKILL to the leader 10 s later.
func Command(ctx context.Context, out *TailBuffer, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdout = out
	cmd.Stderr = out
	return cmd
}

// Run runs a command bounded by timeout and returns its combined output.
// The error says whether it timed out, and wraps *exec.ExitError otherwise.
func Run(ctx context.Context, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out TailBuffer
	err := Command(ctx, &out, name, args...).Run()
	return out.String(), Error(ctx, timeout, err)
}

// Error explains a failed command: timeout, interruption or exit status.
func Error(ctx context.Context, timeout time.Duration, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("timed out after %v: %w", timeout, err)
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted: %w", ctx.Err())
	}
	return err
}

// ExitCode is 0 for success, the status for an exit, -1 otherwise (not
// started, killed by the timeout).
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() >= 0 {
		return ee.ExitCode()
	}
	return -1
}

// Background is a command running in the background (an xdproce server).
type Background struct {
	cmd     *exec.Cmd
	Out     TailBuffer
	ctx     context.Context
	cancel  context.CancelFunc
	timeout time.Duration
	done    chan struct{}
	err     error // valid once done is closed
	Stopped bool  // finish found it still running and stopped it
}

func Start(ctx context.Context, timeout time.Duration, name string, args ...string) (*Background, error) {
	b := &Background{timeout: timeout, done: make(chan struct{})}
	b.ctx, b.cancel = context.WithTimeout(ctx, timeout)
	b.cmd = Command(b.ctx, &b.Out, name, args...)
	if err := b.cmd.Start(); err != nil {
		b.cancel()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		b.err = Error(b.ctx, timeout, b.cmd.Wait())
		close(b.done)
	}()
	return b, nil
}

func (b *Background) Exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// Finish waits up to grace for the process to end by itself, then stops it
// (SIGTERM, then SIGKILL) and returns its output and exit error.
func (b *Background) Finish(grace time.Duration) (string, error) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-b.done:
	case <-t.C:
		b.Stopped = true
		b.cancel()
		<-b.done // bounded by WaitDelay
		b.err = fmt.Errorf("still running %v after the client ended, stopped: %w", grace, b.err)
	}
	b.cancel()
	return b.Out.String(), b.err
}

// ShellQuote quotes s for a POSIX shell.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=%@+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func ShellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = ShellQuote(a)
	}
	return strings.Join(q, " ")
}
