package launch

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcStat is what Linux's /proc says about one process: its resident
// memory now and at its peak, and the CPU time it has used.
type ProcStat struct {
	RSS     int64         // VmRSS, bytes
	PeakRSS int64         // VmHWM (the high-water mark of RSS), bytes
	CPU     time.Duration // user + system time since it started
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times; 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// ReadProcStat reads /proc/PID/status and /proc/PID/stat.
func ReadProcStat(pid int) (ProcStat, error) {
	var s ProcStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "VmRSS":
			dst = &s.RSS
		case "VmHWM":
			dst = &s.PeakRSS
		default:
			continue
		}
		f := strings.Fields(v) // "812345 kB"
		if len(f) == 2 && f[1] == "kB" {
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				*dst = n << 10
			}
		}
	}
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// utime and stime are fields 14 and 15, the 12th and 13th after it.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return s, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return s, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, f[11], f[12])
	}
	s.CPU = time.Duration(ut+st) * time.Second / clockTicks
	return s, nil
}

// Stat reads node p's process statistics; ok is false when it is not
// running or /proc cannot be read (not Linux).
func (p *Proc) Stat() (ProcStat, bool) {
	pid := p.Pid()
	if pid == 0 {
		return ProcStat{}, false
	}
	s, err := ReadProcStat(pid)
	return s, err == nil
}

// AutoWorkers as Config.Workers trains as many nodes as memory holds.
const AutoWorkers = -1

// Memory a local node needs at its peak, measured by dssp up on this
// project's default job as it was then (MLP on MNIST in 4 shards): a
// training node holds the dataset (700–900 MiB RSS), a host-only node its
// replicas (~260 MiB with one trainer pushing, see BENCHMARKS.md "Scale").
const (
	TrainerBytes = 1 << 30
	HostBytes    = 320 << 20
)

// FitWorkers is how many of nodes may train when avail bytes of memory are
// free: all if nodes trainers fit, else the most that fit beside the
// others as hosts, at least 1.
func FitWorkers(nodes int, avail int64) int {
	if avail <= 0 || int64(nodes)*TrainerBytes <= avail {
		return nodes
	}
	k := (avail - int64(nodes)*HostBytes) / (TrainerBytes - HostBytes)
	return int(min(max(k, 1), int64(nodes)))
}

// MemAvailable is /proc/meminfo's MemAvailable in bytes, 0 where unknown.
func MemAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemAvailable:"); ok {
			f := strings.Fields(v)
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil && len(f) == 2 && f[1] == "kB" {
				return n << 10
			}
		}
	}
	return 0
}

// MiB formats bytes in MiB.
func MiB(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 0, 64) }
