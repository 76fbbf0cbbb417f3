package mesh

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// FailureDetection tunes memberlist's SWIM failure detector. A dead node is
// suspected after ProbeInterval+ProbeTimeout and declared failed after the
// suspicion timeout, SuspicionMult·log10(max(1,n))·ProbeInterval, stretched
// up to SuspicionMaxTimeoutMult times that when few peers confirm.
type FailureDetection struct {
	ProbeInterval           time.Duration
	ProbeTimeout            time.Duration
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	GossipInterval          time.Duration
	PushPullInterval        time.Duration
	TCPTimeout              time.Duration
	// DeadNodeReclaimTime lets a restarted node reuse its id from a new
	// address after this long.
	DeadNodeReclaimTime time.Duration
}

// LANDetection is memberlist's LAN profile: robust against GC pauses and
// busy hosts; a killed node is reported in a few seconds.
func LANDetection() FailureDetection {
	c := memberlist.DefaultLANConfig()
	return FailureDetection{
		ProbeInterval:           c.ProbeInterval,
		ProbeTimeout:            c.ProbeTimeout,
		SuspicionMult:           c.SuspicionMult,
		SuspicionMaxTimeoutMult: c.SuspicionMaxTimeoutMult,
		GossipInterval:          c.GossipInterval,
		PushPullInterval:        c.PushPullInterval,
		TCPTimeout:              c.TCPTimeout,
		DeadNodeReclaimTime:     30 * time.Second,
	}
}

// TunedDetection reports a killed node in about 2–3 s on a small mesh,
// half the LAN profile's time, and keeps memberlist's defences against a
// slow host (indirect probes, Lifeguard's awareness stretching probe
// timeouts, suspicion confirmed by another member before it expires
// early): probes every 400 ms with a 200 ms timeout, suspicion
// 3·log10(n)·400 ms (at least 1.2 s) stretched up to 4× when no other
// member confirms it. Measured against LAN and Fast in docs/reliability.md.
func TunedDetection() FailureDetection {
	return FailureDetection{
		ProbeInterval:           400 * time.Millisecond,
		ProbeTimeout:            200 * time.Millisecond,
		SuspicionMult:           3,
		SuspicionMaxTimeoutMult: 4,
		GossipInterval:          100 * time.Millisecond,
		PushPullInterval:        15 * time.Second,
		TCPTimeout:              2 * time.Second,
		DeadNodeReclaimTime:     30 * time.Second,
	}
}

// FastDetection is for tests on loopback: failures are reported in well
// under a second, at the price of false alarms on a loaded host.
func FastDetection() FailureDetection {
	return FailureDetection{
		ProbeInterval:           100 * time.Millisecond,
		ProbeTimeout:            50 * time.Millisecond,
		SuspicionMult:           2,
		SuspicionMaxTimeoutMult: 3,
		GossipInterval:          20 * time.Millisecond,
		PushPullInterval:        2 * time.Second,
		TCPTimeout:              time.Second,
		DeadNodeReclaimTime:     time.Second,
	}
}

func (f FailureDetection) validate() error {
	switch {
	case f.ProbeInterval <= 0 || f.ProbeTimeout <= 0 || f.ProbeTimeout >= f.ProbeInterval:
		return fmt.Errorf("mesh: FailureDetection probe interval %s and timeout %s: need 0 < timeout < interval", f.ProbeInterval, f.ProbeTimeout)
	case f.SuspicionMult < 1 || f.SuspicionMaxTimeoutMult < 1:
		return fmt.Errorf("mesh: FailureDetection SuspicionMult %d and SuspicionMaxTimeoutMult %d must be ≥ 1", f.SuspicionMult, f.SuspicionMaxTimeoutMult)
	case f.GossipInterval <= 0 || f.PushPullInterval <= 0 || f.TCPTimeout <= 0:
		return fmt.Errorf("mesh: FailureDetection GossipInterval %s, PushPullInterval %s, TCPTimeout %s must be positive", f.GossipInterval, f.PushPullInterval, f.TCPTimeout)
	}
	return nil
}

// MembershipConfig configures NewMemberlist.
type MembershipConfig struct {
	Meta     Meta   // this node; Meta.ID is its memberlist name
	BindAddr string // gossip host:port (UDP and TCP), e.g. "127.0.0.1:0"
	// Advertise, if set, is the host:port peers are told to reach this node
	// at instead of BindAddr (a proxy or NAT in front of it).
	Advertise string
	Detection FailureDetection
	Backoff   JoinBackoff
	// Security supplies the gossip key; InsecureSecurity gossips in clear.
	Security *Security
}

// DefaultMembershipConfig returns the LAN profile for meta on bind.
func DefaultMembershipConfig(meta Meta, bind string, sec *Security) MembershipConfig {
	return MembershipConfig{
		Meta:      meta,
		BindAddr:  bind,
		Detection: LANDetection(),
		Backoff:   JoinBackoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second},
		Security:  sec,
	}
}

// Validate reports the first bad value.
func (c MembershipConfig) Validate() error {
	if err := c.Meta.ID.Validate(); err != nil {
		return err
	}
	if _, err := c.Meta.Encode(); err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(c.BindAddr)
	if err != nil || net.ParseIP(host) == nil {
		return fmt.Errorf("mesh: MembershipConfig.BindAddr %q must be ip:port", c.BindAddr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("mesh: MembershipConfig.BindAddr %q: bad port", c.BindAddr)
	}
	if c.Security == nil {
		return fmt.Errorf("mesh: MembershipConfig.Security is nil (use NewSecurity, or InsecureSecurity explicitly)")
	}
	if err := c.Detection.validate(); err != nil {
		return err
	}
	return c.Backoff.validate()
}

type memberlistMembership struct {
	cfg    MembershipConfig
	log    *slog.Logger
	ml     *memberlist.Memberlist
	events *eventQueue

	mu   sync.Mutex
	meta Meta

	// members caches the decoded member list: Members is asked for on
	// every upkeep tick, every /status and placement question, and
	// decoding every peer's metadata and formatting its address each time
	// was a sixth of an idle node's CPU at 32 nodes × 64 shards (dssp-lab bench
	// scale). Memberlist's list changes only through the event delegate
	// (join, leave or failure, metadata update), which bumps version; a
	// cached list older than membersMaxAge is rebuilt anyway.
	version atomic.Uint64
	cacheMu sync.Mutex
	cache   membersCache

	shutdown sync.Once

	// admit, if set, refuses gossip about a node (SetAdmit).
	admit atomic.Pointer[func(NodeID) error]
}

type membersCache struct {
	ok      bool
	version uint64
	at      time.Time
	members []Member
}

// membersMaxAge bounds how long a cached member list is served without an
// event: a safety net should memberlist ever change its list silently.
const membersMaxAge = time.Second

// NewMemberlist starts gossip on cfg.BindAddr; the node is alone until Join.
func NewMemberlist(cfg MembershipConfig, logger *slog.Logger) (Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	host, portStr, _ := net.SplitHostPort(cfg.BindAddr)
	port, _ := strconv.Atoi(portStr)
	m := &memberlistMembership{cfg: cfg, log: logger.With("node", string(cfg.Meta.ID)), events: newEventQueue(), meta: cfg.Meta}

	mc := memberlist.DefaultLANConfig()
	mc.Name = string(cfg.Meta.ID)
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertiseAddr, mc.AdvertisePort = "", 0
	if cfg.Advertise != "" {
		ah, ap, err := net.SplitHostPort(cfg.Advertise)
		if err != nil {
			return nil, fmt.Errorf("mesh: MembershipConfig.Advertise %q: %w", cfg.Advertise, err)
		}
		mc.AdvertiseAddr = ah
		mc.AdvertisePort, _ = strconv.Atoi(ap)
	}
	d := cfg.Detection
	mc.ProbeInterval, mc.ProbeTimeout = d.ProbeInterval, d.ProbeTimeout
	mc.SuspicionMult, mc.SuspicionMaxTimeoutMult = d.SuspicionMult, d.SuspicionMaxTimeoutMult
	mc.GossipInterval, mc.PushPullInterval, mc.TCPTimeout = d.GossipInterval, d.PushPullInterval, d.TCPTimeout
	mc.DeadNodeReclaimTime = d.DeadNodeReclaimTime
	mc.SecretKey = cfg.Security.GossipKey()
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	mc.Delegate = (*metaDelegate)(m)
	mc.Events = (*eventDelegate)(m)
	mc.Alive = (*aliveDelegate)(m)
	mc.Logger = log.New(&slogWriter{log: m.log.With("component", "memberlist"), suspect: m.suspected}, "", 0)

	ml, err := memberlist.Create(mc)
	if err != nil {
		m.events.close()
		return nil, fmt.Errorf("mesh: start memberlist on %s: %w", cfg.BindAddr, err)
	}
	m.ml = ml
	return m, nil
}

func (m *memberlistMembership) Join(ctx context.Context, seeds []string) (int, error) {
	return joinWithRetry(ctx, seeds, m.cfg.Backoff, func() (int, error) { return m.ml.Join(seeds) })
}

// Leave first gossips Meta.Leaving (memberlist reports a leave and a
// failure through the same callback, with no reliable state), then leaves.
func (m *memberlistMembership) Leave(timeout time.Duration) error {
	m.mu.Lock()
	m.meta.Leaving = true
	m.mu.Unlock()
	defer m.version.Add(1)
	if err := m.ml.UpdateNode(timeout / 2); err != nil {
		m.log.Warn("could not announce leaving", "err", err)
	}
	if err := m.ml.Leave(timeout / 2); err != nil {
		if m.ml.NumMembers() == 0 { // alive ones; this node counts as left now
			// memberlist waits for the leave to be gossiped if any peer
			// was alive when it began; when they all left meanwhile (a
			// whole mesh stopped at once) nobody is left to tell.
			m.log.Debug("leave not gossiped: no member left to tell", "err", err)
			return nil
		}
		return fmt.Errorf("mesh: leave: %w", err)
	}
	return nil
}

func (m *memberlistMembership) Members() []Member {
	v := m.version.Load()
	now := time.Now()
	m.cacheMu.Lock()
	defer m.cacheMu.Unlock()
	if c := m.cache; c.ok && c.version == v && now.Sub(c.at) < membersMaxAge {
		return slices.Clone(c.members)
	}
	out := m.decodeMembers()
	m.cache = membersCache{ok: true, version: v, at: now, members: out}
	return slices.Clone(out)
}

// decodeMembers builds the live member list from memberlist's.
func (m *memberlistMembership) decodeMembers() []Member {
	var out []Member
	for _, n := range m.ml.Members() { // memberlist leaves out dead and left nodes
		if mem, err := m.member(n); err == nil {
			out = append(out, mem)
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

func (m *memberlistMembership) LocalNode() Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Member{Meta: m.meta, Addr: m.ml.LocalNode().Address()}
}

func (m *memberlistMembership) UpdateMeta(meta Meta) error {
	if meta.ID != m.cfg.Meta.ID {
		return fmt.Errorf("mesh: UpdateMeta cannot change the node id from %q to %q", m.cfg.Meta.ID, meta.ID)
	}
	if _, err := meta.Encode(); err != nil {
		return err
	}
	m.mu.Lock()
	meta.Leaving = m.meta.Leaving
	m.meta = meta
	m.mu.Unlock()
	defer m.version.Add(1)
	return m.ml.UpdateNode(m.cfg.Detection.TCPTimeout)
}

func (m *memberlistMembership) Events() <-chan Event { return m.events.out }

func (m *memberlistMembership) Shutdown() error {
	var err error
	m.shutdown.Do(func() {
		err = m.ml.Shutdown()
		m.events.close()
	})
	return err
}

// member decodes a peer's metadata; a peer whose metadata is malformed or
// names another id is not a member as far as we are concerned.
func (m *memberlistMembership) member(n *memberlist.Node) (Member, error) {
	meta, err := DecodeMeta(n.Meta)
	if err != nil {
		return Member{}, err
	}
	if string(meta.ID) != n.Name {
		return Member{}, fmt.Errorf("%w: node %q announces id %q", ErrBadMeta, n.Name, meta.ID)
	}
	return Member{Meta: meta, Addr: n.Address()}, nil
}

// SetAdmit installs the node's verdict on members: an alive message (a
// join, a refutation of a suspicion) about a node it refuses is ignored,
// so a revoked node cannot join or come back through this node's gossip.
// A member already in the list stays there until it fails or leaves; the
// node filters its own view ([Membership.Members]'s callers). nil admits
// every node.
func (m *memberlistMembership) SetAdmit(f func(NodeID) error) {
	if f == nil {
		m.admit.Store(nil)
		return
	}
	m.admit.Store(&f)
}

// aliveDelegate asks admit about every alive message.
type aliveDelegate memberlistMembership

func (d *aliveDelegate) NotifyAlive(n *memberlist.Node) error {
	if f := d.admit.Load(); f != nil && n.Name != string(d.cfg.Meta.ID) {
		return (*f)(NodeID(n.Name))
	}
	return nil
}

// metaDelegate answers memberlist's questions about our metadata.
type metaDelegate memberlistMembership

func (d *metaDelegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	b, err := d.meta.Encode()
	d.mu.Unlock()
	if err != nil || len(b) > limit {
		d.log.Error("node metadata does not fit", "bytes", len(b), "limit", limit, "err", err)
		return nil
	}
	return b
}
func (d *metaDelegate) NotifyMsg([]byte)                {}
func (d *metaDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (d *metaDelegate) LocalState(bool) []byte          { return nil }
func (d *metaDelegate) MergeRemoteState([]byte, bool)   {}

// eventDelegate turns memberlist callbacks into queued Events.
type eventDelegate memberlistMembership

func (d *eventDelegate) emit(t EventType, n *memberlist.Node) {
	// Called by memberlist with its node lock held: only mark the cached
	// member list stale (Members must not be called from here).
	d.version.Add(1)
	mem, err := (*memberlistMembership)(d).member(n)
	if err != nil {
		d.log.Warn("ignoring member with bad metadata", "peer", n.Name, "event", t.String(), "err", err)
		if t == EventJoin {
			d.events.push(Event{Type: EventRejected, Member: Member{Meta: Meta{ID: NodeID(n.Name)}, Addr: n.Address()}})
		}
		return
	}
	d.events.push(Event{Type: t, Member: mem})
}

func (d *eventDelegate) NotifyJoin(n *memberlist.Node)   { d.emit(EventJoin, n) }
func (d *eventDelegate) NotifyUpdate(n *memberlist.Node) { d.emit(EventUpdate, n) }
func (d *eventDelegate) NotifyLeave(n *memberlist.Node) {
	if meta, err := DecodeMeta(n.Meta); err == nil && meta.Leaving {
		d.emit(EventLeave, n)
	} else {
		d.emit(EventFailed, n)
	}
}

// suspected queues EventSuspect for the node named. memberlist reports a
// suspicion through no delegate (and leaves Node.State unset), only in the
// log line of the node whose probe went unanswered, so only that node
// emits the event; the Member carries the id alone.
func (m *memberlistMembership) suspected(name string) {
	m.events.push(Event{Type: EventSuspect, Member: Member{Meta: Meta{ID: NodeID(name)}}})
}

// slogWriter bridges memberlist's "[LEVEL] memberlist: message" lines to
// slog, and hands suspect, if set, the name in a failed probe's line. The
// lines of a suspicion and of a member marked failed go to debug: they
// become EventSuspect and EventFailed, which the node logs as it records
// them (node/status.EventLog.LogTo). So do two errors that are no fault:
// a send on this node's own closed socket (it is shutting down), and a
// peer refusing a connection (its process is gone: a graceful leave
// already told the mesh, and a kill becomes a suspicion, then a failure).
type slogWriter struct {
	log     *slog.Logger
	suspect func(name string)
}

func (w *slogWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	level := slog.LevelInfo
	for prefix, l := range map[string]slog.Level{"[DEBUG]": slog.LevelDebug, "[INFO]": slog.LevelInfo, "[WARN]": slog.LevelWarn, "[ERR]": slog.LevelError, "[ERROR]": slog.LevelError} {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			level, line = l, strings.TrimSpace(rest)
			break
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	if rest, ok := strings.CutPrefix(line, "Suspect "); ok && w.suspect != nil {
		if name, _, ok := strings.Cut(rest, " has failed"); ok {
			w.suspect(name)
			level = slog.LevelDebug // the EventSuspect it becomes is logged where it is recorded
		}
	}
	if strings.HasPrefix(line, "Marking ") && strings.Contains(line, " as failed, suspect timeout reached") {
		level = slog.LevelDebug // so is the EventFailed that follows
	}
	// (memberlist may append " from=<addr>" to the error: an ack to a
	// probe that arrived as this node closed its socket.)
	if level == slog.LevelError && (strings.Contains(line, ": use of closed network connection") || strings.Contains(line, ": connect: connection refused")) {
		level = slog.LevelDebug
	}
	w.log.Log(context.Background(), level, line)
	return len(p), nil
}
