package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"syscall"
	"time"
)

// DefaultPort is perftest's and ibv_rc_pingpong's TCP port (DEF_PORT).
const DefaultPort = 18515

// Version is the perftest version xdproce announces: that of Debian
// bookworm's perftest 4.5-0.17. Peers from 6.28 on negotiate parameters
// only with a peer that announces 6.28 or later, so announcing 6.06 keeps
// every peer on the exchange this package speaks.
const Version = "6.06"

const versionSize = 16

// channel carries perftest's out-of-band messages: TCP by default, or
// with -R a control connection of its own made with rdma_cm (cm.go).
type channel interface {
	// write sends one message; read receives the next, of n bytes. A zero
	// deadline waits as long as the channel lives.
	write(b []byte, deadline time.Time) error
	read(n int, deadline time.Time) ([]byte, error)
	// marshalDest and parseDest are the channel's key message: ASCII text
	// over TCP, the binary struct over rdma_cm.
	marshalDest(d Dest) []byte
	parseDest(b []byte) (Dest, error)
	// finish ends the conversation after the closing hand shake.
	finish() error
	// abort fails the exchange under way, from any goroutine.
	abort()
	// close releases the channel.
	close() error
}

// oob is perftest's out-of-band exchange: every exchange is lock-step and
// of a fixed size. The client writes first and then reads; the server
// reads first and then writes. perftest reads with a single read(2) (or
// one receive), so each message goes out in one write.
type oob struct {
	ch     channel
	server bool
	// timeout bounds each exchange: a peer that stops answering fails the
	// run instead of hanging it.
	timeout time.Duration
	// sent, if set, sees every message written (tests record them).
	sent func([]byte)
}

// exchange sends out and returns the peer's message of the same size,
// within the channel's timeout.
func (o *oob) exchange(out []byte) ([]byte, error) { return o.exchangeWithin(out, o.timeout) }

// exchangeWithin is exchange with its own bound; 0 waits as long as the
// channel lives (the run's context still ends it).
func (o *oob) exchangeWithin(out []byte, timeout time.Duration) ([]byte, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	write := func() error {
		if o.sent != nil {
			o.sent(out)
		}
		return o.ch.write(out, deadline)
	}
	if o.server {
		in, err := o.ch.read(len(out), deadline)
		if err != nil {
			return nil, err
		}
		return in, write()
	}
	if err := write(); err != nil {
		return nil, err
	}
	return o.ch.read(len(out), deadline)
}

// versions exchanges version strings and checks the peer's is one this
// exchange serves (perftest refuses peers older than 5.70).
func (o *oob) versions() (string, error) {
	out := make([]byte, versionSize)
	copy(out, Version)
	in, err := o.exchange(out)
	if err != nil {
		return "", err
	}
	peer := string(bytes.TrimRight(in, "\x00"))
	v, err := strconv.ParseFloat(peer, 64)
	if err != nil {
		return peer, fmt.Errorf("perftest: the peer's version %q is not a number", peer)
	}
	if v < 5.70 {
		return peer, fmt.Errorf("perftest: the peer's version %s is older than 5.70", peer)
	}
	return peer, nil
}

// int32s exchanges one big-endian 32-bit integer.
func (o *oob) int32s(v uint32) (uint32, error) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	in, err := o.exchange(b[:])
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(in), nil
}

// uint64s exchanges one big-endian 64-bit integer.
func (o *oob) uint64s(v uint64) (uint64, error) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	in, err := o.exchange(b[:])
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(in), nil
}

// float64s exchanges one double, byte-swapped to big-endian as perftest does.
func (o *oob) float64s(v float64) (float64, error) {
	u, err := o.uint64s(math.Float64bits(v))
	return math.Float64frombits(u), err
}

// mtu exchanges the ibv_mtu enum as a decimal digit and a NUL; the lower wins.
func (o *oob) mtu(m int) (int, error) {
	out := []byte{byte('0' + m), 0}
	in, err := o.exchange(out)
	if err != nil {
		return 0, err
	}
	peer := int(in[0] - '0')
	if in[1] != 0 || peer < 1 || peer > 5 {
		return 0, fmt.Errorf("perftest: the peer sent MTU %q", in)
	}
	return min(m, peer), nil
}

// keys exchanges one QP's key message.
func (o *oob) keys(d Dest) (Dest, error) {
	in, err := o.exchange(o.ch.marshalDest(d))
	if err != nil {
		return Dest{}, err
	}
	return o.ch.parseDest(in)
}

// barrier is a key exchange whose content nobody reads: perftest's
// ctx_hand_shake used as a synchronisation point.
func (o *oob) barrier(d Dest) error {
	_, err := o.keys(d)
	return err
}

// awaitPeer is a hand shake that waits for however long the peer runs its
// test first: a passive server meets its client only when the client is done.
func (o *oob) awaitPeer(d Dest) error {
	_, err := o.exchangeWithin(o.ch.marshalDest(d), 0)
	return err
}

// closeConn ends the conversation as perftest's ctx_close_connection: one
// last hand shake (the peer may still be running), then what the channel
// does at its end (over TCP, "done").
func (o *oob) closeConn(d Dest) error {
	if err := o.awaitPeer(d); err != nil {
		return err
	}
	return o.ch.finish()
}

// tcpChannel is perftest's default channel: one TCP connection.
type tcpChannel struct{ conn net.Conn }

func (t *tcpChannel) write(b []byte, deadline time.Time) error {
	if err := t.conn.SetDeadline(deadline); err != nil {
		return err
	}
	if _, err := t.conn.Write(b); err != nil {
		return fmt.Errorf("perftest: writing %d bytes to the peer: %w", len(b), err)
	}
	return nil
}

func (t *tcpChannel) read(n int, deadline time.Time) ([]byte, error) {
	if err := t.conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	in := make([]byte, n)
	if _, err := io.ReadFull(t.conn, in); err != nil {
		return nil, fmt.Errorf("perftest: reading %d bytes from the peer: %w", n, err)
	}
	return in, nil
}

func (t *tcpChannel) marshalDest(d Dest) []byte        { return d.Marshal() }
func (t *tcpChannel) parseDest(b []byte) (Dest, error) { return ParseDest(b) }

// finish writes "done" with its NUL and closes, reading nothing, as
// perftest's ctx_close_connection over TCP.
func (t *tcpChannel) finish() error {
	_, err := t.conn.Write([]byte("done\x00"))
	return errors.Join(err, t.conn.Close())
}

func (t *tcpChannel) abort() { t.conn.Close() }

func (t *tcpChannel) close() error { return t.conn.Close() }

// dial connects to a perftest server, retrying while it is not yet
// listening, until ctx ends.
func dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("perftest: connecting to %s: %w", addr, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("perftest: connecting to %s: %w", addr, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// accept waits on port, on every address, for one client, as perftest's
// server does, and stops listening once it has come.
func accept(ctx context.Context, bind string, port int) (net.Conn, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", net.JoinHostPort(bind, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("perftest: listening on port %d: %w", port, err)
	}
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	c, err := l.Accept()
	l.Close()
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("perftest: waiting for a client on port %d: %w", port, err)
	}
	return c, nil
}
