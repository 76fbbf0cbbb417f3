package netlab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"dsspmesh/node/launch"
)

// Host is one emulated host: its namespace, its address on the data
// network (what a node binds and announces) and on the management network
// (its HTTP).
type Host struct {
	Index int
	Site  int
	NS    string
	Addr  string
	Mgmt  string
}

// Lab is a running topology. Close removes it.
type Lab struct {
	spec  Spec
	slot  int
	lock  *os.File
	hosts []Host
	log   *slog.Logger

	mu     sync.Mutex
	line   *delayLine // nil without delay or loss
	cut    map[int]bool
	closed bool
}

// Check says what this process lacks to run a lab (nil: nothing).
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, veth pairs, tc qdiscs)")
	}
	for _, bin := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("needs %s (iproute2) on PATH: %w", bin, err)
		}
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("needs /dev/net/tun for the delay line: %w", err)
	}
	return nil
}

// Require skips t when this process cannot run a lab, saying why, and
// fails it instead under CI=true, where the lab is part of the suite.
func Require(t testing.TB) {
	t.Helper()
	if err := Check(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("link lab: %v (CI=true: a missing capability fails the test)", err)
		}
		t.Skipf("link lab: %v; skipped (under CI=true this fails)", err)
	}
}

// lockDir holds one lock file per slot.
const lockDir = "/run/dssp-netlab"

// slots bounds the labs that run at once on a machine.
const slots = 16

// Start builds the topology of spec. On any failure it removes what it
// built and returns the error.
func Start(ctx context.Context, spec Spec, log *slog.Logger) (*Lab, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := Check(); err != nil {
		return nil, fmt.Errorf("netlab: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	Sweep(log)
	slot, lock, err := takeSlot()
	if err != nil {
		return nil, err
	}
	l := &Lab{spec: spec, slot: slot, lock: lock, log: log, cut: map[int]bool{}}
	removeSlot(slot, log) // what an owner of this slot killed outright left
	if err := l.build(ctx); err != nil {
		if cerr := l.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	log.Info("link lab up", "slot", slot, "topology", spec.Describe())
	return l, nil
}

// takeSlot locks the first free slot.
func takeSlot() (int, *os.File, error) {
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return 0, nil, fmt.Errorf("netlab: %w", err)
	}
	for k := range slots {
		f, ok := tryLock(k)
		if ok {
			return k, f, nil
		}
	}
	return 0, nil, fmt.Errorf("netlab: all %d lab slots are in use (%s)", slots, lockDir)
}

// tryLock takes slot k's lock without waiting.
func tryLock(k int) (*os.File, bool) {
	f, err := os.OpenFile(filepath.Join(lockDir, fmt.Sprintf("slot%d.lock", k)), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

// Sweep removes what labs of processes that no longer run left behind:
// the namespaces of every slot whose lock nobody holds.
func Sweep(log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for k := range slots {
		if len(slotNamespaces(k)) == 0 {
			continue
		}
		if f, ok := tryLock(k); ok {
			removeSlot(k, log)
			f.Close()
		}
	}
}

// Leftovers lists the lab namespaces and root-namespace links of every
// slot that exist now (a test's check that a lab left nothing).
func Leftovers() []string {
	var out []string
	for k := range slots {
		out = append(out, slotNamespaces(k)...)
	}
	if b, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 1 && strings.HasPrefix(f[1], namePrefix) {
				out = append(out, "link "+strings.TrimSuffix(strings.Split(f[1], "@")[0], ":"))
			}
		}
	}
	return out
}

// namePrefix starts every name a lab gives: dsspl<slot>-.
const namePrefix = "dsspl"

func prefix(slot int) string { return namePrefix + strconv.Itoa(slot) + "-" }

// slotNamespaces lists slot k's namespaces.
func slotNamespaces(k int) []string {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix(k)) {
			out = append(out, e.Name())
		}
	}
	return out
}

// removeSlot kills every process in slot k's namespaces and deletes them
// (their links go with them), then any root link of the slot left over.
func removeSlot(k int, log *slog.Logger) error {
	var errs []error
	// The root end of the management link first: a namespace deleted is
	// destroyed in the background, and the veth pairs in it with it.
	if _, err := os.Stat(filepath.Join("/sys/class/net", mgmtRoot(k))); err == nil {
		if err := ip(context.Background(), "link", "del", mgmtRoot(k)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range slotNamespaces(k) {
		killIn(ns, log)
		if err := ip(context.Background(), "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killIn sends SIGKILL to every process in namespace ns (those a lab's
// owner started there) and waits up to 5 s for them to go.
func killIn(ns string, log *slog.Logger) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := nsPids(ns)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, pid := range pids {
			log.Debug("killing a process left in a lab namespace", "ns", ns, "pid", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func nsPids(ns string) []int {
	b, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			out = append(out, pid)
		}
	}
	return out
}

// Names and addresses of slot k: namespaces <prefix>h<i> (hosts),
// <prefix>s<j> (switches), <prefix>r (router), <prefix>m (management
// switch); data subnet 10.(160+k).j.0/24 for site j, the router at .254;
// management 10.(160+k).250.0/24, the root namespace at .254.
func (l *Lab) ns(kind string, i int) string {
	if i < 0 {
		return prefix(l.slot) + kind
	}
	return prefix(l.slot) + kind + strconv.Itoa(i)
}

func mgmtRoot(slot int) string { return prefix(slot) + "m" }

func (l *Lab) net(third int) string { return fmt.Sprintf("10.%d.%d", 160+l.slot, third) }

const mgmtNet = 250

func (l *Lab) build(ctx context.Context) error {
	s := l.spec
	router, mgmt := l.ns("r", -1), l.ns("m", -1)
	var all []string
	for j := range s.Sites {
		all = append(all, l.ns("s", j))
	}
	if s.Sites > 1 {
		all = append(all, router)
	}
	all = append(all, mgmt)
	for i := range s.Nodes() {
		h := Host{Index: i, Site: s.SiteOf(i), NS: l.ns("h", i),
			Addr: fmt.Sprintf("%s.%d", l.net(s.SiteOf(i)), i%s.Hosts+1), Mgmt: fmt.Sprintf("%s.%d", l.net(mgmtNet), i+1)}
		l.hosts = append(l.hosts, h)
		all = append(all, h.NS)
	}
	var c cmds
	for _, ns := range all {
		c.ip(ctx, "netns", "add", ns)
		c.ip(ctx, "-n", ns, "link", "set", "dev", "lo", "up")
	}
	// Switches: one bridge per site, and the management switch.
	for _, sw := range append(all[:s.Sites:s.Sites], mgmt) {
		c.ip(ctx, "-n", sw, "link", "add", "br0", "type", "bridge", "forward_delay", "0", "stp_state", "0")
		c.ip(ctx, "-n", sw, "link", "set", "dev", "br0", "up")
	}
	root := mgmtRoot(l.slot)
	c.ip(ctx, "link", "add", root, "type", "veth", "peer", "name", "root", "netns", mgmt)
	c.ip(ctx, "-n", mgmt, "link", "set", "dev", "root", "master", "br0", "up")
	c.ip(ctx, "addr", "add", l.net(mgmtNet)+".254/24", "dev", root)
	c.ip(ctx, "link", "set", "dev", root, "up")
	for _, h := range l.hosts {
		sw, port := l.ns("s", h.Site), "p"+strconv.Itoa(h.Index)
		c.ip(ctx, "-n", h.NS, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", sw)
		c.ip(ctx, "-n", sw, "link", "set", "dev", port, "master", "br0", "up")
		c.ip(ctx, "-n", h.NS, "addr", "add", h.Addr+"/24", "dev", "eth0")
		c.ip(ctx, "-n", h.NS, "link", "set", "dev", "eth0", "up")
		port = "h" + strconv.Itoa(h.Index)
		c.ip(ctx, "-n", h.NS, "link", "add", "mg0", "type", "veth", "peer", "name", port, "netns", mgmt)
		c.ip(ctx, "-n", mgmt, "link", "set", "dev", port, "master", "br0", "up")
		c.ip(ctx, "-n", h.NS, "addr", "add", h.Mgmt+"/24", "dev", "mg0")
		c.ip(ctx, "-n", h.NS, "link", "set", "dev", "mg0", "up")
		if s.Sites > 1 {
			c.ip(ctx, "-n", h.NS, "route", "add", "default", "via", l.net(h.Site)+".254", "dev", "eth0")
		}
		if s.Rate > 0 {
			c.tbf(ctx, h.NS, "eth0", s.Rate, s.queue(false))
		}
	}
	if c.err != nil || s.Sites == 1 {
		return c.err
	}
	if err := l.In(router, func() error {
		for _, k := range []string{"ipv4/ip_forward", "ipv4/conf/all/rp_filter", "ipv4/conf/default/rp_filter"} {
			v := "0"
			if k == "ipv4/ip_forward" {
				v = "1"
			}
			if err := os.WriteFile("/proc/sys/net/"+k, []byte(v), 0o644); err != nil {
				return fmt.Errorf("netlab: %s in %s: %w", k, router, err)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	for j := range s.Sites {
		up := "up" + strconv.Itoa(j)
		c.ip(ctx, "-n", router, "link", "add", up, "type", "veth", "peer", "name", "r", "netns", l.ns("s", j))
		c.ip(ctx, "-n", l.ns("s", j), "link", "set", "dev", "r", "master", "br0", "up")
		c.ip(ctx, "-n", router, "addr", "add", l.net(j)+".254/24", "dev", up)
		c.ip(ctx, "-n", router, "link", "set", "dev", up, "up")
		if s.Between > 0 {
			c.tbf(ctx, router, up, s.Between, s.queue(true))
		}
	}
	if c.err != nil || (s.Delay == 0 && s.Loss == 0) {
		return c.err
	}
	// The delay line: every packet that enters the router from a site is
	// routed into the TUN device (table 100); this process holds it and
	// writes it back, and the kernel routes it on by the main table.
	var line *delayLine
	err := l.In(router, func() (err error) {
		line, err = openDelayLine(delayTUN, s.Delay, s.Loss, l.log)
		return err
	})
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.line = line
	l.mu.Unlock()
	c.ip(ctx, "-n", router, "link", "set", "dev", delayTUN, "mtu", "1500", "up")
	c.ip(ctx, "-n", router, "route", "add", "default", "dev", delayTUN, "table", "100")
	for j := range s.Sites {
		c.ip(ctx, "-n", router, "rule", "add", "pref", "100", "iif", "up"+strconv.Itoa(j), "lookup", "100")
	}
	return c.err
}

// delayTUN is the delay line's device in the router namespace.
const delayTUN = "dly0"

// Hosts are the lab's hosts, site by site.
func (l *Lab) Hosts() []Host { return append([]Host(nil), l.hosts...) }

// LaunchHosts are the hosts as node/launch places nodes on them: node i
// binds host i's data address, serves HTTP on its management address and
// runs through `ip netns exec` in its namespace.
func (l *Lab) LaunchHosts() []launch.Host {
	out := make([]launch.Host, len(l.hosts))
	for i, h := range l.hosts {
		out[i] = launch.Host{Addr: h.Addr, HTTPHost: h.Mgmt, Exec: []string{"ip", "netns", "exec", h.NS}}
	}
	return out
}

// Cut drops every packet between site and the other sites at the router,
// silently, until Heal.
func (l *Lab) Cut(site int) error { return l.setCut(site, true) }

// Heal restores a site Cut dropped.
func (l *Lab) Heal(site int) error { return l.setCut(site, false) }

func (l *Lab) setCut(site int, cut bool) error {
	if l.spec.Sites < 2 || site < 0 || site >= l.spec.Sites {
		return fmt.Errorf("netlab: no link to cut or heal at site %d of %d", site, l.spec.Sites)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("netlab: lab closed")
	}
	if l.cut[site] == cut {
		return nil
	}
	router := l.ns("r", -1)
	from, to := strconv.Itoa(10+2*site), strconv.Itoa(11+2*site)
	var c cmds
	if cut {
		c.ip(context.Background(), "-n", router, "rule", "add", "pref", from, "iif", "up"+strconv.Itoa(site), "blackhole")
		c.ip(context.Background(), "-n", router, "rule", "add", "pref", to, "to", l.net(site)+".0/24", "blackhole")
	} else {
		c.ip(context.Background(), "-n", router, "rule", "del", "pref", from)
		c.ip(context.Background(), "-n", router, "rule", "del", "pref", to)
	}
	if c.err == nil {
		l.cut[site] = cut
		l.log.Info("link lab", "site", site, "cut", cut)
	}
	return c.err
}

// Close kills every process left in the lab's namespaces, stops the delay
// line, deletes the namespaces and frees the slot. It may be called more
// than once.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	line := l.line
	l.mu.Unlock()
	// Processes first: a namespace with a process in it outlives its
	// deletion.
	for _, h := range l.hosts {
		killIn(h.NS, l.log)
	}
	if line != nil {
		line.close()
	}
	err := removeSlot(l.slot, l.log)
	if left := slotNamespaces(l.slot); len(left) > 0 {
		err = errors.Join(err, fmt.Errorf("netlab: namespaces left: %s", strings.Join(left, " ")))
	}
	l.lock.Close()
	return err
}

// cmds runs ip and tc commands until the first error, which it keeps.
type cmds struct{ err error }

func (c *cmds) ip(ctx context.Context, args ...string) {
	if c.err == nil {
		c.err = ip(ctx, args...)
	}
}

func (c *cmds) tbf(ctx context.Context, ns, dev string, r Rate, queue time.Duration) {
	if c.err == nil {
		c.err = run(ctx, "tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf",
			"rate", strconv.FormatInt(int64(r), 10)+"bit", "burst", strconv.FormatInt(burst(r), 10),
			"latency", strconv.FormatInt(queue.Microseconds(), 10)+"us")
	}
}

func ip(ctx context.Context, args ...string) error { return run(ctx, "ip", args...) }

// failCmd, set by a test, fails the first command whose text holds it.
var failCmd string

func run(ctx context.Context, name string, args ...string) error {
	if failCmd != "" && strings.Contains(strings.Join(args, " "), failCmd) {
		return fmt.Errorf("netlab: %s %s: failed on purpose (test)", name, strings.Join(args, " "))
	}
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netlab: %s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
