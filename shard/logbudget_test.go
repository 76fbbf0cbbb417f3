package shard

import (
	"context"
	"testing"

	"github.com/hashicorp/raft"

	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

func TestClampCount(t *testing.T) {
	for _, tc := range []struct {
		v          float64
		lo, hi, ok uint64
	}{{0.5, 2, 256, 2}, {16.7, 2, 256, 16}, {1e9, 2, 256, 256}, {5, 4, 1, 4}} {
		if got := clampCount(tc.v, tc.lo, tc.hi); got != tc.ok {
			t.Errorf("clampCount(%g, %d, %d) = %d, want %d", tc.v, tc.lo, tc.hi, got, tc.ok)
		}
	}
}

// TestBudgetFloorIsTheState: a 100 MB model's shard (25 MB of θ and
// velocity, 6.25 MB bf16 entries) snapshots every 4 entries and keeps 2,
// where the byte budgets alone would give the clamps' 2 and 1; a small
// shard keeps the byte budgets.
func TestBudgetFloorIsTheState(t *testing.T) {
	cfg := DefaultConfig(1, "n1")
	const entry, state = 6.25e6, 25e6
	if th, tr := budgetCounts(cfg, entry, 0); th != 2 || tr != 1 {
		t.Errorf("no state: %d, %d; want the clamps 2, 1", th, tr)
	}
	if th, tr := budgetCounts(cfg, entry, state); th != 4 || tr != 2 {
		t.Errorf("25 MB state: %d, %d; want 4, 2", th, tr)
	}
	if th, tr := budgetCounts(cfg, 256<<10, 470e3); th != 16 || tr != 8 {
		t.Errorf("MLP shard: %d, %d; want the byte budgets' 16, 8", th, tr)
	}
}

// TestLogBoundedByBytes: pushes of 256 KiB into a one-replica shard on disk,
// with count bounds that alone would keep 320 entries (80 MiB), make raft
// snapshot every LogBytes/entry entries and keep TrailingBytes/entry, and
// the data dir stays near LogBytes + TrailingBytes instead.
func TestLogBoundedByBytes(t *testing.T) {
	const n = 1 << 16 // 256 KiB of float32
	const pushes = 160
	def := DefaultConfig(11, "n1")
	c, dirs := diskCluster(t, 11, 256, 64)
	cfg := c.cfg
	c.cfg = func(id mesh.NodeID) Config {
		x := cfg(id)
		x.LogBytes, x.TrailingBytes = def.LogBytes, def.TrailingBytes
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
		if i%10 == 9 {
			peak = max(peak, dirSize(t, dirs["n1"]))
		}
	}
	r := c.replica("n1")
	rc := r.raft.ReloadableConfig()
	// An entry holds one push (4n bytes of gradient plus its header), so the
	// counts are a little under the budgets over 4n.
	if lo, hi := uint64(def.LogBytes/(4*n))-2, uint64(def.LogBytes/(4*n)); rc.SnapshotThreshold < lo || rc.SnapshotThreshold > hi {
		t.Errorf("SnapshotThreshold %d, want in [%d, %d]", rc.SnapshotThreshold, lo, hi)
	}
	if lo, hi := uint64(def.TrailingBytes/(4*n))-2, uint64(def.TrailingBytes/(4*n)); rc.TrailingLogs < lo || rc.TrailingLogs > hi {
		t.Errorf("TrailingLogs %d, want in [%d, %d]", rc.TrailingLogs, lo, hi)
	}
	first, _ := r.deps.Stores.Log.FirstIndex()
	last, _ := r.deps.Stores.Log.LastIndex()
	bound := def.LogBytes + def.TrailingBytes
	t.Logf("%d pushes of %d KiB: log holds %d entries, data dir peak %.1f MiB (budget %.0f MiB of log; counts alone: %d entries)",
		pushes, 4*n>>10, last-first+1, float64(peak)/(1<<20), float64(bound)/(1<<20), 256+64)
	// bbolt's file grows to the largest log it held (rounded up to a power
	// of two below 16 MiB) and a snapshot check may come 2 intervals late.
	if peak > 4*bound {
		t.Errorf("data dir peak %d bytes, over 4 × the log budget %d", peak, bound)
	}
}

// TestLogBudgetIgnoresOtherEntries: only commands count, and a zero
// LogBytes leaves raft's counts alone.
func TestLogBudgetIgnoresOtherEntries(t *testing.T) {
	b := newLogBudget(Config{SnapshotThreshold: 256, TrailingLogs: 64})
	b.observe([]*raft.Log{{Type: raft.LogCommand, Data: make([]byte, 1<<20)}})
	if th, tr := b.counts(); th != 256 || tr != 64 {
		t.Fatalf("counts %d/%d with LogBytes 0", th, tr)
	}
	b = newLogBudget(Config{SnapshotThreshold: 256, TrailingLogs: 64, LogBytes: 4 << 20, TrailingBytes: 2 << 20})
	b.observe([]*raft.Log{{Type: raft.LogConfiguration, Data: make([]byte, 1<<20)}})
	if b.seen != 0 {
		t.Fatalf("a configuration entry was measured")
	}
}

// TestByteBudgetTakesTurns: a second large acquire waits for the first's
// release; anything fits while nothing is held.
func TestByteBudgetTakesTurns(t *testing.T) {
	b := newByteBudget(10)
	b.acquire(25) // larger than the limit, admitted alone
	got := make(chan struct{})
	go func() { b.acquire(25); close(got) }()
	select {
	case <-got:
		t.Fatal("second acquire admitted while 25 bytes were held")
	default:
	}
	b.release(25)
	<-got
	b.release(25)
	if b.held != 0 {
		t.Fatalf("held %d after releasing all", b.held)
	}
}

// counts is what the budget asks of raft now.
func (b *logBudget) counts() (threshold, trailing uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.thresh, b.trail
}
