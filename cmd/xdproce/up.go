package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"sync"
	"time"

	"github.com/xdproce/xdproce/daemon"
	"github.com/xdproce/xdproce/internal/pcap"
	"github.com/xdproce/xdproce/nic"
	"github.com/xdproce/xdproce/verbs"
)

// upFlags declares up's flags; its action runs the daemon: the device on IFACE, served to every process of
// this network namespace, until SIGTERM or SIGINT (or xdproce down).
func upFlags(fs *flag.FlagSet) action {
	dev := fs.String("d", "", "network interface to run the device on (required)")
	fs.StringVar(dev, "dev", "", "same as -d")
	queues := fs.Int("queues", 0, "RX queues to serve (0: all the interface has)")
	busyPoll := fs.Bool("busy-poll", false, "engines spin instead of sleeping when idle")
	rxCoalesce := fs.Duration("rx-coalesce", 0, rxCoalesceUsage)
	spinMax := fs.Duration("spin-max", 0, spinMaxUsage)
	fastPath := fs.Bool("fast-path", false, "the XDP program executes and acknowledges small in-order WRITEs into device memory itself (docs/fastpath.md)")
	group := fs.String("group", "", "let members of this group attach, besides root and the daemon's user")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	metrics := fs.String("metrics", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464)")
	pcapFile := fs.String("pcap", "", "write every RoCEv2 frame sent and received to this pcapng file (Wireshark decodes it; slows the device)")
	return func(ctx context.Context, std stdio, _ []string) error {
		stdout := std.out
		if *dev == "" {
			return fmt.Errorf("%w: -d IFACE is required", errUsage)
		}
		var level slog.Level
		if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
			return fmt.Errorf("%w: --log-level: %v", errUsage, err)
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
		gid := -1
		if *group != "" {
			g, err := user.LookupGroup(*group)
			if err != nil {
				return fmt.Errorf("%w: --group: %v", errUsage, err)
			}
			gid, _ = strconv.Atoi(g.Gid)
		}
		d, err := verbs.Open(ctx, *dev, verbs.Options{Queues: *queues, BusyPoll: *busyPoll, RxCoalesce: *rxCoalesce, SpinMax: *spinMax, FastPath: *fastPath, Logger: log, Embedded: true,
			ThreadWait: true}) // the engines are the daemon's only data path
		if err != nil {
			return err
		}
		srv, err := daemon.New(daemon.Config{Ifname: *dev, Device: d, Group: gid, Logger: log})
		if err != nil {
			return errors.Join(err, d.Close())
		}
		if *pcapFile != "" {
			stop, err := capture(d, *pcapFile)
			if err != nil {
				return errors.Join(err, d.Close())
			}
			defer func() {
				if err := stop(); err != nil {
					log.Error("xdproce: pcap", "err", err)
				}
			}()
			log.Info("xdproce: capturing frames", "file", *pcapFile)
		}
		log.Info("xdproce: device up", "device", nic.DeviceName(*dev), "datapath", d.QueryPort().DataPath, "engines", d.Engines())
		fmt.Fprintf(stdout, "%s up on %s\n", nic.DeviceName(*dev), *dev)
		if *metrics != "" {
			mctx, stop := context.WithCancel(ctx)
			defer stop()
			go func() {
				if err := srv.ServeMetrics(mctx, *metrics); err != nil {
					log.Error("xdproce: metrics", "err", err)
				}
			}()
		}
		err = srv.Run(ctx)
		log.Info("xdproce: device down", "device", nic.DeviceName(*dev))
		return errors.Join(err, d.Close())
	}
}

// downFlags declares down's flags; its action stops the daemon serving IFACE and waits until it has let go.
func downFlags(fs *flag.FlagSet) action {
	dev := fs.String("d", "", "network interface whose daemon to stop (required)")
	fs.StringVar(dev, "dev", "", "same as -d")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the daemon to stop")
	return func(ctx context.Context, std stdio, _ []string) error {
		stdout := std.out
		if *dev == "" {
			return fmt.Errorf("%w: -d IFACE is required", errUsage)
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		d, err := verbs.Dial(ctx, *dev)
		if err != nil {
			return err
		}
		if err := d.StopDaemon(ctx); err != nil {
			return fmt.Errorf("stopping the daemon for %s: %w", *dev, err)
		}
		fmt.Fprintf(stdout, "%s down\n", nic.DeviceName(*dev))
		return nil
	}
}

// capture writes every frame d sends and receives to path as pcapng, until
// the returned stop is called.
func capture(d *verbs.Device, path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--pcap: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := pcap.NewNGWriter(bw, 65535)
	if err != nil {
		return nil, errors.Join(err, f.Close())
	}
	var mu sync.Mutex // the engines of several queues write
	var werr error
	d.SetCapture(func(frame []byte, outbound bool) {
		mu.Lock()
		if werr == nil {
			werr = w.WritePacket(time.Now(), frame, outbound)
		}
		mu.Unlock()
	})
	return func() error {
		d.SetCapture(nil)
		mu.Lock()
		defer mu.Unlock()
		err := errors.Join(werr, bw.Flush(), f.Close())
		werr = os.ErrClosed // an engine that loaded the capture before it stopped writes nothing
		return err
	}, nil
}
