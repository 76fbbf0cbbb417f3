package assemble

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node/shards"
	"dsspmesh/raftstore"
	"dsspmesh/shard"
)

// RaftReplicas opens shard.Replicas whose raft state lives in raftstore's
// bbolt stores under DataDir and whose raft and worker RPCs travel over
// Transport.
type RaftReplicas struct {
	DataDir   string
	Transport mesh.Transport
	Resolve   mesh.Resolver
	Logger    *slog.Logger
	// Config, if set, gives each replica's timing (tests shorten raft's);
	// nil means shard.DefaultConfig sized to the groups this node hosts
	// (shard.Config.ForGroups), or as is with FixedTiming.
	Config      func(shard uint32, id mesh.NodeID) shard.Config
	FixedTiming bool
	// InMemory keeps each replica's raft log, stable store and snapshots
	// in memory (raftstore.NewInmem) and nothing under DataDir: for a
	// benchmark of the push path without the disk (lab/bench). A node
	// never sets it.
	InMemory bool
}

var _ shards.Replicas = (*RaftReplicas)(nil)

// HasState reports whether shard id has a folder of raft state.
func (r *RaftReplicas) HasState(id uint32) bool {
	_, err := os.Stat(raftstore.ShardDir(r.DataDir, id))
	return err == nil
}

// Discard removes shard id's folder of raft state (its replica shut down).
func (r *RaftReplicas) Discard(id uint32) error {
	if r.InMemory {
		return nil
	}
	if err := os.RemoveAll(raftstore.ShardDir(r.DataDir, id)); err != nil {
		return fmt.Errorf("discard shard %d: %w", id, err)
	}
	return nil
}

// Open starts this node's replica of shard id, reporting through hooks.
func (r *RaftReplicas) Open(id uint32, hooks shards.ReplicaHooks) (shards.Replica, error) {
	stores := raftstore.NewInmem()
	if !r.InMemory {
		var err error
		if stores, err = raftstore.Open(r.DataDir, id, raftstore.DefaultConfig(), r.Logger); err != nil {
			return nil, err
		}
	}
	// An RPC's deadline grows with the entries' size as raft's timing
	// does (shard.Config.ForEntryBytes).
	rt, err := raftstore.NewMeshTransportTimeout(r.Transport, id, r.Resolve, r.Logger,
		time.Duration(float64(raftstore.DefaultRPCTimeout)*shard.EntryStretch(hooks.EntryBytes)))
	if err != nil {
		stores.Close()
		return nil, err
	}
	cfg := shard.DefaultConfig(id, r.Transport.LocalID())
	if !r.FixedTiming {
		cfg = cfg.ForGroups(hooks.Groups)
	}
	cfg = cfg.ForEntryBytes(hooks.EntryBytes).ForRTT(hooks.RTT)
	if r.Config != nil {
		cfg = r.Config(id, r.Transport.LocalID())
	}
	rep, err := shard.NewReplica(cfg, shard.Deps{
		Transport: r.Transport, Resolve: r.Resolve, RaftTransport: rt, Stores: stores, Logger: r.Logger,
		Observer: hooks.Applied, HashEvery: hooks.StateHashEvery, OnLeader: hooks.Leading, ApplyTime: hooks.ApplyTime,
		AllowRaftPeer: hooks.AllowRaftPeer, OnDiverged: hooks.Diverged, OnEvicted: hooks.Evicted,
	})
	if err != nil {
		rt.Close()
		stores.Close()
		return nil, fmt.Errorf("replica: %w", err)
	}
	return rep, nil
}
