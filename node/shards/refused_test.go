package shards

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"dsspmesh/mesh"
	"dsspmesh/node/records"
	"dsspmesh/shardapi"
)

// members is a membership of fixed live members.
type members struct {
	mesh.Membership
	ids []mesh.NodeID
}

func (m members) Members() []mesh.Member {
	out := make([]mesh.Member, len(m.ids))
	for i, id := range m.ids {
		out[i] = mesh.Member{Meta: mesh.Meta{ID: id}, Addr: string(id) + ":7946"}
	}
	return out
}

// refusingReplicas refuses to open the shards in damaged with its error,
// and opens the others as idle followers.
type refusingReplicas struct {
	mu      sync.Mutex
	damaged map[uint32]error
	opens   map[uint32]int
}

func (r *refusingReplicas) HasState(uint32) bool { return false }
func (r *refusingReplicas) Discard(uint32) error { return nil }

func (r *refusingReplicas) Open(id uint32, _ ReplicaHooks) (Replica, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.opens[id]++
	if err := r.damaged[id]; err != nil {
		return nil, err
	}
	return idleReplica{}, nil
}

// idleReplica follows, in no configuration yet.
type idleReplica struct{ Replica }

func (idleReplica) IsLeader() bool                 { return false }
func (idleReplica) Status() shardapi.ReplicaStatus { return shardapi.ReplicaStatus{State: "Follower"} }
func (idleReplica) Configuration() (shardapi.Configuration, error) {
	return shardapi.Configuration{}, errors.New("none yet")
}
func (idleReplica) Shutdown() error { return nil }

// A replica placed here after the node started whose store is damaged is
// named, not a crash: the node goes on with its other replicas, the
// refusal is logged and recorded as an event once (not every round it is
// tried again), /status shows it on the shard, and the replica starts once
// the cause is gone (the remedy applied).
func TestReplicaRefusedAfterStartIsNamedOnceAndShown(t *testing.T) {
	damage := errors.New("raftstore: shard 1: log store /d/shards/1/raft.db is empty; … remove /d/shards/1 to have this node rejoin the shard as a fresh replica")
	reps := &refusingReplicas{damaged: map[uint32]error{1: damage}, opens: map[uint32]int{}}
	var events []records.Event
	var logged strings.Builder
	m := New(Deps{ID: "a", Replicas: reps, Members: members{ids: []mesh.NodeID{"a", "b", "c"}},
		Event: func(e records.Event) { events = append(events, e) }, SetPeers: func([]string) error { return nil },
		Logger: slog.New(slog.NewTextHandler(&logged, nil))},
		Config{NumParams: 30, Shards: 3, Replication: 3, Spec: shardapi.Spec{}})
	ctx := context.Background()
	for range 5 {
		m.sync(ctx)
	}
	if reps.opens[1] != 5 || m.local(0) == nil || m.local(2) == nil || m.local(1) != nil {
		t.Fatalf("opens %v, replicas 0:%v 1:%v 2:%v: want shard 1 tried every round and the others running", reps.opens, m.local(0), m.local(1), m.local(2))
	}
	// The replicas that opened empty start their heal timelines (heal.go).
	events = slices.DeleteFunc(events, func(e records.Event) bool { return e.Kind == records.EventHeal })
	if len(events) != 1 || events[0].Kind != records.EventReplicaRefused || *events[0].Shard != 1 || !strings.Contains(events[0].Detail, damage.Error()) {
		t.Fatalf("events = %+v, want one %s of shard 1 naming the damage", events, records.EventReplicaRefused)
	}
	if n := strings.Count(logged.String(), "level=ERROR"); n != 1 || !strings.Contains(logged.String(), "/d/shards/1/raft.db is empty") {
		t.Fatalf("logged %d errors, want one naming the file:\n%s", n, logged.String())
	}
	st, _ := m.Status()
	if !strings.Contains(st[1].Refused, damage.Error()) || st[0].Refused != "" || st[0].Local != "follower" {
		t.Fatalf("status %+v, want shard 1 refused with the damage and shard 0 a follower", st)
	}

	reps.mu.Lock()
	delete(reps.damaged, 1) // the shard folder removed
	reps.mu.Unlock()
	m.sync(ctx)
	if st, _ := m.Status(); m.local(1) == nil || st[1].Refused != "" {
		t.Fatalf("after the remedy: replica %v, refused %q; want it running and nothing refused", m.local(1), st[1].Refused)
	}
}
