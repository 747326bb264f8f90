package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of /proc/stat: fixed at 100 ticks per second by the
// kernel's user ABI whatever CONFIG_HZ is.
const userHZ = 100

// cpuSample is the CPU time spent so far by this process (every thread: both
// xdproce devices and both TCP ends run in it) and by softirqs on all CPUs.
type cpuSample struct {
	process time.Duration // getrusage(RUSAGE_SELF) user + system
	softirq time.Duration // /proc/stat "cpu" line, softirq column
}

func sampleCPU() (cpuSample, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return cpuSample{}, fmt.Errorf("bench: getrusage: %w", err)
	}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuSample{}, fmt.Errorf("bench: %w", err)
	}
	soft, err := softirqTicks(stat)
	if err != nil {
		return cpuSample{}, err
	}
	return cpuSample{
		process: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		softirq: time.Duration(soft) * time.Second / userHZ,
	}, nil
}

// softirqTicks reads the softirq column (the 7th number) of /proc/stat's
// aggregate "cpu" line.
func softirqTicks(stat []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(stat))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 8 || string(f[0]) != "cpu" {
			continue
		}
		return strconv.ParseUint(string(f[7]), 10, 64)
	}
	return 0, fmt.Errorf("bench: /proc/stat has no aggregate cpu line with a softirq column")
}

// since is the CPU time between two samples: process time plus softirq time.
func (s cpuSample) since(t cpuSample) time.Duration {
	return s.process - t.process + s.softirq - t.softirq
}
