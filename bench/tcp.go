package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/xdproce/xdproce/bench/report"
	"github.com/xdproce/xdproce/internal/netns"
)

// tcpReadBuf is what the receiving application reads at once, as iperf does.
const tcpReadBuf = 256 << 10

// tcpStream streams size-byte writes from A to B over n connections, one
// writer and one reader goroutine per connection, and counts the bytes (and
// whole messages) that arrive.
func tcpStream(ctx context.Context, hosts [2]*Host, warmup, d time.Duration, size, n int) (window, error) {
	type conn struct{ c, s net.Conn }
	conns := make([]conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.c.Close()
			c.s.Close()
		}
	}()
	for range n {
		c, s, err := netns.TCPPair(ctx, hosts[0], hosts[1], hosts[1].Addr)
		if err != nil {
			return window{}, err
		}
		conns = append(conns, conn{c, s})
	}
	w, err := measureLoad(ctx, warmup, d, func(ctx context.Context, stop <-chan struct{}, m *meter) error {
		var wg sync.WaitGroup
		errs := make([]error, 2*n)
		for i, c := range conns {
			wg.Add(2)
			go func() {
				defer wg.Done()
				errs[2*i] = writeUntil(stop, c.c, size)
			}()
			go func() {
				defer wg.Done()
				errs[2*i+1] = readAll(c.s, size, m)
			}()
		}
		// Unblock everything if the run is cancelled.
		finished := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
				for _, c := range conns {
					c.c.Close()
					c.s.Close()
				}
			case <-finished:
			}
		}()
		wg.Wait()
		close(finished)
		return errors.Join(errs...)
	})
	if err != nil {
		return w, fmt.Errorf("tcp stream %s ×%d: %w", report.FormatSize(size), n, err)
	}
	return w, nil
}

// writeUntil writes size-byte messages until stop closes, then closes its
// half of the connection so the reader sees the end.
func writeUntil(stop <-chan struct{}, c net.Conn, size int) error {
	msg := make([]byte, size)
	for {
		select {
		case <-stop:
			return c.(*net.TCPConn).CloseWrite()
		default:
		}
		if _, err := c.Write(msg); err != nil {
			return err
		}
	}
}

// readAll reads until the end of the stream, counting bytes and whole messages.
func readAll(c net.Conn, size int, m *meter) error {
	buf := make([]byte, tcpReadBuf)
	var total int64
	for {
		k, err := c.Read(buf)
		if k > 0 {
			before := total / int64(size)
			total += int64(k)
			m.bytes.Add(int64(k))
			m.msgs.Add(total/int64(size) - before)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// tcpPingPong times size-byte exchanges over one TCP_NODELAY connection:
// A writes, B reads the whole message and writes it back, A reads it.
func tcpPingPong(ctx context.Context, hosts [2]*Host, warmup, d time.Duration, size int) (Latencies, error) {
	c, s, err := netns.TCPPair(ctx, hosts[0], hosts[1], hosts[1].Addr)
	if err != nil {
		return Latencies{}, err
	}
	peerDone := make(chan error, 1)
	go func() {
		m := make([]byte, size)
		for {
			if _, err := io.ReadFull(s, m); err != nil {
				if errors.Is(err, io.EOF) {
					err = nil // A closed: the end
				}
				peerDone <- err
				return
			}
			if _, err := s.Write(m); err != nil {
				peerDone <- err
				return
			}
		}
	}()
	// A lost exchange fails the point instead of hanging the run.
	deadline := time.Now().Add(warmup + d + drainTimeout)
	_ = c.SetDeadline(deadline)
	msg := make([]byte, size)
	lat, err := timeRoundTrips(ctx, warmup, d, func() error {
		if _, err := c.Write(msg); err != nil {
			return err
		}
		_, err := io.ReadFull(c, msg)
		return err
	})
	c.Close()
	if perr := <-peerDone; perr != nil && err == nil {
		err = perr
	}
	s.Close()
	if err != nil {
		return lat, fmt.Errorf("tcp ping-pong %s: %w", report.FormatSize(size), err)
	}
	return lat, nil
}
