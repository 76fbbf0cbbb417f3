package mesh

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"dsspmesh/internal/wait"
)

func newGossipNode(t testing.TB, sec *Security, id NodeID, det FailureDetection) Membership {
	t.Helper()
	cfg := DefaultMembershipConfig(Meta{ID: id, QUICAddr: "127.0.0.1:9" + string(id[len(id)-1]), Trains: true, Backend: "cpu", Proto: ProtocolVersion}, "127.0.0.1:0", sec)
	cfg.Detection = det
	cfg.Backoff = JoinBackoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}
	m, err := NewMemberlist(cfg, testLogger(t).With("test_node", string(id)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown() })
	return m
}

// waitEvent returns the first event of type typ for id on m.
func waitEvent(t testing.TB, m Membership, typ EventType, id NodeID, within time.Duration) Event {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-m.Events():
			if !ok {
				t.Fatalf("events closed before %s of %s", typ, id)
			}
			t.Logf("event %s %s", ev.Type, ev.Member.ID)
			if ev.Type == typ && ev.Member.ID == id {
				return ev
			}
		case <-timer.C:
			t.Fatalf("no %s event for %s within %s", typ, id, within)
		}
	}
}

// suspectedBeforeFailure reads m's events until id fails and reports
// whether a suspect event for id came first.
func suspectedBeforeFailure(t testing.TB, m Membership, id NodeID, within time.Duration) bool {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	suspect := false
	for {
		select {
		case ev, ok := <-m.Events():
			if !ok {
				t.Fatalf("events closed before %s failed", id)
			}
			if ev.Member.ID != id {
				continue
			}
			switch ev.Type {
			case EventSuspect:
				suspect = true
			case EventFailed:
				return suspect
			}
		case <-timer.C:
			t.Fatalf("no failed event for %s within %s", id, within)
		}
	}
}

// formMesh starts 5 nodes that join through the first one and waits until
// every node sees all 5.
func formMesh(t *testing.T, det FailureDetection) []Membership {
	sec := mustSecurity(t, mustKey(t))
	var nodes []Membership
	for i := range 5 {
		nodes = append(nodes, newGossipNode(t, sec, NodeID(fmt.Sprintf("node-%d", i)), det))
	}
	seed := nodes[0].LocalNode().Addr
	for _, n := range nodes[1:] {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := n.Join(ctx, []string{seed}); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	wait.For(t, 10*time.Second, "5 members everywhere", func() bool {
		for _, n := range nodes {
			if len(n.Members()) != 5 {
				return false
			}
		}
		return true
	})
	m := nodes[3].Members()[1]
	if m.ID != "node-1" || !m.Trains || m.Backend != "cpu" || m.QUICAddr != "127.0.0.1:91" || m.Proto != ProtocolVersion {
		t.Fatalf("metadata of node-1 as seen by node-3: %+v", m)
	}
	return nodes
}

func measureFailure(t *testing.T, det FailureDetection, within time.Duration) {
	nodes := formMesh(t, det)
	victim := nodes[4]
	start := time.Now()
	victim.Shutdown() // closed without leaving
	var slowest time.Duration
	suspected := 0
	for _, n := range nodes[:4] {
		if suspectedBeforeFailure(t, n, "node-4", within) {
			suspected++
		}
		slowest = max(slowest, time.Since(start))
	}
	// Suspicion is sampled, so a node may miss it; all four cannot.
	if suspected == 0 {
		t.Fatal("no node reported node-4 suspect before declaring it failed")
	}
	t.Logf("killed node reported failed on all 4 others after %s (probe %s, timeout %s, suspicion mult %d)",
		slowest, det.ProbeInterval, det.ProbeTimeout, det.SuspicionMult)
	for _, n := range nodes[:4] {
		if got := len(n.Members()); got != 4 {
			t.Fatalf("%s sees %d members after the failure, want 4", n.LocalNode().ID, got)
		}
	}
}

func TestMemberlistFiveNodesDetectFailureFast(t *testing.T) {
	measureFailure(t, FastDetection(), 10*time.Second)
}

// TestMemberlistFailureDetectionLAN measures the LAN profile; it takes
// several seconds and is skipped with -short.
func TestMemberlistFailureDetectionLAN(t *testing.T) {
	if testing.Short() {
		t.Skip("LAN failure detection takes seconds")
	}
	measureFailure(t, LANDetection(), 40*time.Second)
}

func TestMemberlistLeaveIsNotFailure(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	a, b := newGossipNode(t, sec, "a-1", FastDetection()), newGossipNode(t, sec, "b-2", FastDetection())
	if _, err := b.Join(testCtx(t), []string{a.LocalNode().Addr}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, a, EventJoin, "b-2", 5*time.Second)
	meta := b.LocalNode().Meta
	meta.Trains = false
	if err := b.UpdateMeta(meta); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, a, EventUpdate, "b-2", 5*time.Second); ev.Member.Trains {
		t.Fatal("update did not carry Trains=false")
	}
	if err := b.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, a, EventLeave, "b-2", 5*time.Second)
}

func TestMemberlistWrongKeyOrNoKeyCannotJoin(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	seed := newGossipNode(t, sec, "seed-1", FastDetection())
	cases := map[string]*Security{
		"wrong key": mustSecurity(t, mustKey(t)),
		"no key":    InsecureSecurity(testLogger(t)),
	}
	for name, isec := range cases {
		t.Run(name, func(t *testing.T) {
			intruder := newGossipNode(t, isec, "intruder-1", FastDetection())
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			_, err := intruder.Join(ctx, []string{seed.LocalNode().Addr})
			var je *JoinError
			if !errors.As(err, &je) || !errors.Is(err, ErrNotJoined) {
				t.Fatalf("join err = %v, want *JoinError", err)
			}
			t.Logf("refused: %v", err)
			if n := len(seed.Members()); n != 1 {
				t.Fatalf("seed sees %d members", n)
			}
		})
	}
}

func TestJoinErrorNamesSeeds(t *testing.T) {
	m := newGossipNode(t, mustSecurity(t, mustKey(t)), "lonely-1", FastDetection())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := m.Join(ctx, []string{"127.0.0.1:1"})
	var je *JoinError
	if !errors.As(err, &je) || je.Attempts < 2 || je.Seeds[0] != "127.0.0.1:1" {
		t.Fatalf("err = %v", err)
	}
	t.Log(err)
}

func TestMembershipConfigValidate(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	good := DefaultMembershipConfig(Meta{ID: "n1"}, "127.0.0.1:0", sec)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*MembershipConfig){
		"bad id":       func(c *MembershipConfig) { c.Meta.ID = "a b" },
		"bad bind":     func(c *MembershipConfig) { c.BindAddr = "nowhere" },
		"no security":  func(c *MembershipConfig) { c.Security = nil },
		"probe order":  func(c *MembershipConfig) { c.Detection.ProbeTimeout = c.Detection.ProbeInterval },
		"backoff zero": func(c *MembershipConfig) { c.Backoff.Initial = 0 },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

// TestMemberlistAdmitRefusesARevokedNode: a node whose admit refuses an id
// ignores that node's alive messages, so it never lists it, while a node
// it admits joins as usual.
func TestMemberlistAdmitRefusesARevokedNode(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	seed := newGossipNode(t, sec, "seed-1", FastDetection())
	seed.(interface{ SetAdmit(func(NodeID) error) }).SetAdmit(func(id NodeID) error {
		if id == "revoked-2" {
			return fmt.Errorf("node %q is revoked", id)
		}
		return nil
	})
	ok := newGossipNode(t, sec, "member-3", FastDetection())
	if _, err := ok.Join(testCtx(t), []string{seed.LocalNode().Addr}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, seed, EventJoin, "member-3", 5*time.Second)
	revoked := newGossipNode(t, sec, "revoked-2", FastDetection())
	revoked.Join(testCtx(t), []string{seed.LocalNode().Addr}) // its side may list the seed; the seed's must not list it
	if err := wait.Until(testCtx(t), 5*time.Second, "member-3 lists the revoked node (it admits it)", func() bool { return len(ok.Members()) == 3 }); err != nil {
		t.Fatal(err)
	}
	// member-3 gossips the revoked node's alive to the seed from now on;
	// the seed ignores it round after round (an absence, watched over a
	// second of FastDetection's gossip).
	for range 20 {
		for _, m := range seed.Members() {
			if m.ID == "revoked-2" {
				t.Fatal("the seed lists a node its admit refuses")
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}
