package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/xdproce/xdproce/nic"
)

// ServeMetrics serves the device's counters in Prometheus' text format at
// http://addr/metrics until ctx ends: the transport's under rxe's names and
// the XDP program's, as counters labelled with the device, and the number of
// attached clients as a gauge.
func (s *Server) ServeMetrics(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("daemon: metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		if err := s.writeMetrics(w); err != nil {
			s.log.Warn("daemon: metrics", "err", err)
		}
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	s.log.Info("daemon: metrics served", "addr", ln.Addr().String())
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s *Server) writeMetrics(w io.Writer) error {
	transport, port, err := s.counters()
	if err != nil {
		return err
	}
	label := fmt.Sprintf(`{device=%q}`, nic.DeviceName(s.cfg.Ifname))
	for _, n := range append(transport, port...) {
		fmt.Fprintf(w, "# TYPE xdproce_%s counter\nxdproce_%s%s %d\n", n.Name, n.Name, label, n.Value)
	}
	_, err = fmt.Fprintf(w, "# TYPE xdproce_clients gauge\nxdproce_clients%s %d\n", label, s.Clients())
	return err
}
