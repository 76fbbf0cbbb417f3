package eval

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/modelfile"
	"dsspmesh/shardapi"
)

// Snapshot is the mesh's parameters read from every shard's leader
// (see "Model snapshots" in the package doc).
type Snapshot struct {
	Theta []float32
	Meta  modelfile.Meta
}

// modelReader reads every shard through one shardapi.Client each; clients
// are not safe for concurrent use, so one read runs at a time: turn holds
// the token of the read in progress (a channel, so waiting for it obeys
// the caller's deadline).
type modelReader struct {
	turn    chan struct{}
	clients []*shardapi.Client // guarded by turn
}

// readBytesInFlight bounds the fp32 replies a model read holds at once:
// every shard of a small model is read side by side, a 100 MB model's
// 12.5 MB slices one at a time (each reply is decoded into the snapshot
// as it arrives; all eight at once held 100 MB of replies on the reader,
// and the evaluator of that model peaks while it reads).
const readBytesInFlight = 16 << 20

// readsInFlight is how many of the shards (bounds) a read asks at once.
func readsInFlight(bounds [][2]int) int {
	largest := 1
	for _, b := range bounds {
		largest = max(largest, 4*(b[1]-b[0]))
	}
	return max(1, min(len(bounds), readBytesInFlight/largest))
}

// connect makes the clients, one per shard, once (in the turn).
func (rd *modelReader) connect(d Deps, job Job) error {
	if rd.clients != nil {
		return nil
	}
	resolve := mesh.ResolveFromMembership(d.Members)
	var cs []*shardapi.Client
	for s := range job.Bounds {
		id := uint32(s)
		c, err := shardapi.NewClient(shardapi.DefaultClientConfig(id, clock.WorkerID(d.ID), func() []mesh.NodeID { return job.Candidates(id) }),
			d.Transport, resolve, d.Logger)
		if err != nil {
			return err
		}
		cs = append(cs, c)
	}
	rd.clients = cs
	return nil
}

// shard0 runs fn with the client of shard 0, which records the
// evaluation claims, in the read turn.
func (rd *modelReader) shard0(ctx context.Context, d Deps, job Job, fn func(c *shardapi.Client) error) error {
	select {
	case rd.turn <- struct{}{}:
		defer func() { <-rd.turn }()
	case <-ctx.Done():
		return fmt.Errorf("shard 0: a model read still runs: %w", ctx.Err())
	}
	if err := rd.connect(d, job); err != nil {
		return err
	}
	if len(rd.clients) == 0 {
		return errors.New("the job has no shard 0")
	}
	return fn(rd.clients[0])
}

// read is ReadVersions with the room's edges d and the job.
func (rd *modelReader) read(ctx context.Context, d Deps, job Job, source string, into []float32) (*Snapshot, []*shardapi.Version, error) {
	select {
	case rd.turn <- struct{}{}:
		defer func() { <-rd.turn }()
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("read the model: another read still runs: %w", ctx.Err())
	}
	if err := rd.connect(d, job); err != nil {
		return nil, nil, err
	}
	if len(into) != job.Layout.Total() {
		into = make([]float32, job.Layout.Total())
	}
	snap := &Snapshot{Theta: into}
	got := make([]shardapi.Slice, len(rd.clients))
	errs := make([]error, len(rd.clients))
	var wg sync.WaitGroup
	turns := make(chan struct{}, readsInFlight(job.Bounds))
	for i, c := range rd.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			turns <- struct{}{}
			defer func() { <-turns }()
			b := job.Bounds[i]
			got[i], errs[i] = c.ReadInto(ctx, snap.Theta[b[0]:b[1]])
		}()
	}
	wg.Wait()
	versions := make([]*shardapi.Version, len(got))
	for i, sl := range got {
		if b := job.Bounds[i]; errs[i] == nil && len(sl.Params) == b[1]-b[0] {
			versions[i] = &shardapi.Version{Index: sl.Index, Min: sl.Min}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, versions, fmt.Errorf("read the model: %w", err)
	}
	snap.Meta = modelfile.Meta{Model: job.Name, Dataset: job.Dataset, Source: source, TakenAt: time.Now(), Job: string(job.Spec)}
	for i, sl := range got {
		b := job.Bounds[i]
		if len(sl.Params) != b[1]-b[0] {
			return nil, versions, fmt.Errorf("read the model: shard %d returned %d parameters, want %d", i, len(sl.Params), b[1]-b[0])
		}
		snap.Meta.Shards = append(snap.Meta.Shards, modelfile.ShardClock{Shard: sl.Shard, Leader: string(sl.Leader),
			Min: sl.Min, Max: sl.Max, Index: sl.Index, Samples: sl.Samples})
		if i == 0 || sl.Min < snap.Meta.Clock {
			snap.Meta.Clock = sl.Min
		}
		if i == 0 || sl.Samples < snap.Meta.Samples {
			snap.Meta.Samples = sl.Samples
		}
	}
	return snap, versions, nil
}
