package bench

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"dsspmesh/internal/testlogger"
)

// TestMeasureReplicationPushesThroughAssembledReplicas: the replicated-push
// measurement boots its shard through node/assemble's replica wiring, in
// memory and on disk, and every replica count pushes and batches.
func TestMeasureReplicationPushesThroughAssembledReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("boots 1- and 3-replica Raft groups over QUIC")
	}
	for _, dir := range []string{"", t.TempDir()} {
		cfg := ReplicationConfig{Replicas: []int{1, 3}, Workers: 2, Payload: 4 << 10, Duration: 300 * time.Millisecond, Dir: dir}
		res, err := MeasureReplication(context.Background(), cfg, testlogger.New(t, slog.LevelWarn))
		if err != nil {
			t.Fatalf("dir %q: %v", dir, err)
		}
		if res.Baseline.Pushes == 0 || len(res.Rates) != 2 {
			t.Fatalf("dir %q: %+v", dir, res)
		}
		for _, r := range res.Rates {
			if r.Pushes == 0 || r.PushesPerEntr <= 0 || r.Ratio <= 0 {
				t.Errorf("dir %q: %d replicas: %+v, want pushes batched into entries", dir, r.Replicas, r)
			}
		}
	}
}
