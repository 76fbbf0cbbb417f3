//go:build shardlong

package shard

import (
	"context"
	"os"
	"strconv"
	"testing"

	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// TestDiskBoundedUnderLargePushes pushes SHARD_DISK_PUSHES (default 10000)
// gradients of 1 MiB through a 1-replica shard on the disk stores with the default
// log bounds and reports the largest size of its data directory, sampled
// every 100 pushes, against the bound (SnapshotThreshold + TrailingLogs) ×
// entry + snapshots (bbolt reuses freed pages but never shrinks its file); between snapshot checks the log also
// grows by the push rate × up to 2 SnapshotInterval.
func TestDiskBoundedUnderLargePushes(t *testing.T) {
	pushes := 10000
	if s := os.Getenv("SHARD_DISK_PUSHES"); s != "" {
		pushes, _ = strconv.Atoi(s)
	}
	const n = 1 << 18 // 1 MiB of float32
	def := DefaultConfig(10, "n1")
	c, dirs := diskCluster(t, 10, def.SnapshotThreshold, def.TrailingLogs)
	cfg := c.cfg
	c.cfg = func(id mesh.NodeID) Config {
		x := cfg(id)
		x.SnapshotInterval = def.SnapshotInterval
		return x
	}
	ids := c.bootZeros(1, n, "asp")
	cl := c.client("w", ids)
	if _, err := cl.AddWorker(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	grad := make([]float32, n)
	var params []float32
	var peak int64
	for i := range pushes {
		p, err := cl.Push(context.Background(), shardapi.Push{Iter: int64(i), Samples: 1, ComputeNs: 1, Payload: cl.Encode(grad, 1), Into: params})
		if err != nil {
			t.Fatal(err)
		}
		params = p.Params
		if i%100 == 99 {
			peak = max(peak, dirSize(t, dirs["n1"]))
		}
	}
	final := dirSize(t, dirs["n1"])
	bound := int64(def.SnapshotThreshold+def.TrailingLogs)*(4*n) + 3*2*(4*n)
	t.Logf("%d pushes of 1 MiB: data dir peak %.1f MiB, final %.1f MiB; expected bound ≈ %.1f MiB (log written %.0f MiB)",
		pushes, float64(peak)/(1<<20), float64(final)/(1<<20), float64(bound)/(1<<20), float64(pushes))
	// Between snapshot checks (every 1–2 SnapshotInterval) the log grows by
	// the push rate times that time, on top of the bound; bbolt keeps its
	// file at the peak and reuses the pages.
	if peak > 3*bound {
		t.Errorf("disk use final %d, peak %d against bound %d", final, peak, bound)
	}
}
