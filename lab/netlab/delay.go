package netlab

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// delayLine holds every packet the kernel routes into its TUN device for
// a fixed delay, drops a share of them, and writes the others back. One
// goroutine reads, one writes; a constant delay keeps their order.
type delayLine struct {
	f     *os.File
	delay time.Duration
	loss  float64
	q     chan packet
	wg    sync.WaitGroup
	log   *slog.Logger

	passed, dropped, overflow atomic.Uint64
}

type packet struct {
	b   []byte
	due time.Time
}

// delayQueue bounds the packets in flight on the line: at 1 Gbit/s and a
// 1 s delay, ~83 000 full frames; beyond it a packet is dropped, as a
// router's full buffer drops it.
const delayQueue = 1 << 17

// openDelayLine opens TUN device name in this thread's namespace (call it
// inside Lab.In) and starts the line.
func openDelayLine(name string, delay time.Duration, loss float64, log *slog.Logger) (*delayLine, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netlab: open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlab: tun %s: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlab: create tun %s: %w", name, err)
	}
	d := &delayLine{f: os.NewFile(uintptr(fd), name), delay: delay, loss: loss, q: make(chan packet, delayQueue), log: log}
	d.wg.Add(2)
	go d.read()
	go d.write()
	return d, nil
}

// urgent raises the calling goroutine's thread above the node processes
// it shares the cores with (nice −10), so the line keeps its delay while
// they compute; best effort.
func urgent() {
	runtime.LockOSThread()
	unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), -10)
}

func (d *delayLine) read() {
	defer d.wg.Done()
	defer close(d.q)
	urgent()
	buf := make([]byte, 1<<16)
	for {
		n, err := d.f.Read(buf)
		if err != nil {
			return // closed
		}
		now := time.Now()
		if d.loss > 0 && rand.Float64() < d.loss {
			d.dropped.Add(1)
			continue
		}
		p := packet{b: append([]byte(nil), buf[:n]...), due: now.Add(d.delay)}
		select {
		case d.q <- p:
		default:
			d.overflow.Add(1)
		}
	}
}

func (d *delayLine) write() {
	defer d.wg.Done()
	urgent()
	for p := range d.q {
		if w := time.Until(p.due); w > 0 {
			time.Sleep(w)
		}
		if _, err := d.f.Write(p.b); err == nil {
			d.passed.Add(1)
		}
	}
}

// close stops the line; the TUN device goes with its file.
func (d *delayLine) close() {
	d.f.Close()
	d.wg.Wait()
	d.log.Debug("delay line closed", "passed", d.passed.Load(), "dropped", d.dropped.Load(), "overflow", d.overflow.Load())
}
