package shards

import (
	"context"
	"log/slog"
	"testing"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// blockingReplica's Reconcile blocks until its context ends (a catch-up
// that never completes: the new replica's node does not run it) and
// reports each call's desired set and how it ended.
type blockingReplica struct {
	Replica
	calls  chan []mesh.NodeID
	ended  chan error
	config shardapi.Configuration
}

func (r *blockingReplica) Reconcile(ctx context.Context, desired []mesh.NodeID) (bool, error) {
	r.calls <- desired
	<-ctx.Done()
	r.ended <- ctx.Err()
	return false, ctx.Err()
}

func (r *blockingReplica) Status() shardapi.ReplicaStatus { return shardapi.ReplicaStatus{} }

func (r *blockingReplica) RemoveWorker(context.Context, clock.WorkerID) error { return nil }

// A reconcile step toward a placement that changed while it ran is
// cancelled, and the next round works toward the new placement; the same
// placement leaves the running step alone. (Before, a step begun on a
// passing view of membership after a healed partition waited out the
// one-minute reconcileTimeout for a replica its node no longer ran.)
func TestReconcileStepTowardAnOldPlacementIsCancelled(t *testing.T) {
	m := &Manager{d: Deps{Logger: slog.New(slog.DiscardHandler)}, reconciling: map[uint32]*reconcileStep{}}
	rep := &blockingReplica{calls: make(chan []mesh.NodeID, 4), ended: make(chan error, 4)}
	ctx := context.Background()
	passing := []mesh.NodeID{"a", "b", "c"}
	settled := []mesh.NodeID{"a", "c", "d"}

	m.reconcile(ctx, 7, rep, passing)
	if got := <-rep.calls; !sameNodes(got, passing) {
		t.Fatalf("first step toward %v, want %v", got, passing)
	}
	// The same placement, in another order: the step goes on.
	m.reconcile(ctx, 7, rep, []mesh.NodeID{"c", "b", "a"})
	select {
	case err := <-rep.ended:
		t.Fatalf("a step toward an unchanged placement was cancelled: %v", err)
	case got := <-rep.calls:
		t.Fatalf("a second step toward %v started while one ran", got)
	default:
	}
	// Placement changed — back to what the configuration already is, as
	// when a healed partition's members re-merge: the running step is
	// cancelled at once all the same.
	rep.config = shardapi.Configuration{Voters: settled}
	m.mu.Lock()
	old := m.reconciling[7]
	m.mu.Unlock()
	m.reconcile(ctx, 7, rep, settled)
	if err := <-rep.ended; err != context.Canceled {
		t.Fatalf("the step toward the old placement ended with %v, want context.Canceled", err)
	}
	// Once it has returned, nothing is left to do for that placement; a
	// later change starts a step toward the new one.
	<-old.done
	m.reconcile(ctx, 7, rep, settled)
	m.mu.Lock()
	if m.reconciling[7] != nil {
		t.Error("a step started toward the placement the configuration already is")
	}
	m.mu.Unlock()
	rep.config = shardapi.Configuration{}
	m.reconcile(ctx, 7, rep, settled)
	if got := <-rep.calls; !sameNodes(got, settled) {
		t.Fatalf("next step toward %v, want %v", got, settled)
	}
	m.mu.Lock()
	m.reconciling[7].cancel()
	m.mu.Unlock()
	<-rep.ended
}

func (r *blockingReplica) Configuration() (shardapi.Configuration, error) {
	return r.config, nil
}
