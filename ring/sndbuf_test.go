package ring

import "testing"

// TestSendBuffer: by default a socket's send buffer holds sendBufferFrames
// full frames in flight as copy-mode skbs (a guest's virtio-net frees skbs
// late, and a kick that finds the buffer full sends nothing); a negative
// SendBuffer keeps the kernel's smaller default.
func TestSendBuffer(t *testing.T) {
	n := newVethNet(t, 1, 1500)
	cfg := Config{RXFrames: 64, TXFrames: 512}
	a := n.open(n.a, 0, cfg)
	want := cfg.withDefaults().SendBuffer
	if want != sendBufferFrames*(2*4096+1024)/2 {
		t.Fatalf("default SendBuffer %d", want)
	}
	if a.SendBuffer() < want {
		t.Fatalf("send buffer %d bytes, asked for %d", a.SendBuffer(), want)
	}
	cfg.SendBuffer = -1
	b := n.open(n.b, 0, cfg)
	if b.SendBuffer() <= 0 || b.SendBuffer() >= want {
		t.Fatalf("kernel default send buffer %d bytes, want it below %d", b.SendBuffer(), want)
	}
}
