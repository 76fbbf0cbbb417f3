package cudaops

import (
	"fmt"
	"math/rand/v2"
)

// LoaderConfig says which part of a dataset a worker reads and how.
type LoaderConfig struct {
	Worker    int    // this worker's index in [0, Workers)
	Workers   int    // how many workers share the dataset
	BatchSize int    // samples per mini-batch
	Seed      uint64 // same seed, same partition and order on every node
}

// Validate names the first bad field.
func (c LoaderConfig) Validate() error {
	switch {
	case c.Workers <= 0:
		return fmt.Errorf("cudaops: LoaderConfig.Workers %d must be > 0", c.Workers)
	case c.Worker < 0 || c.Worker >= c.Workers:
		return fmt.Errorf("cudaops: LoaderConfig.Worker %d outside [0,%d)", c.Worker, c.Workers)
	case c.BatchSize <= 0:
		return fmt.Errorf("cudaops: LoaderConfig.BatchSize %d must be > 0", c.BatchSize)
	}
	return nil
}

// Partition returns the sample indices worker owns out of n: a seeded
// permutation of [0, n) cut into workers contiguous parts whose sizes
// differ by at most one. Every worker computing it with the same arguments
// gets disjoint parts that together cover [0, n).
func Partition(n, worker, workers int, seed uint64) []int {
	perm := rand.New(rand.NewPCG(seed, 0x70617274)).Perm(n)
	lo, hi := worker*n/workers, (worker+1)*n/workers
	return perm[lo:hi]
}

// Loader hands out mini-batches from one worker's partition, reshuffling
// the partition at each epoch with a seed derived from (Seed, Worker,
// epoch), so a restarted worker replays the same sequence. A Loader is not
// safe for concurrent use.
type Loader struct {
	ds    Dataset
	cfg   LoaderConfig
	part  []int
	order []int
	pos   int
	epoch int
}

// NewLoader returns a loader over worker's partition of ds.
func NewLoader(ds Dataset, cfg LoaderConfig) (*Loader, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	part := Partition(ds.Len(), cfg.Worker, cfg.Workers, cfg.Seed)
	if len(part) == 0 {
		return nil, fmt.Errorf("cudaops: worker %d of %d gets no samples of %d", cfg.Worker, cfg.Workers, ds.Len())
	}
	l := &Loader{ds: ds, cfg: cfg, part: part, order: make([]int, len(part))}
	l.shuffle()
	return l, nil
}

func (l *Loader) shuffle() {
	copy(l.order, l.part)
	rng := rand.New(rand.NewPCG(l.cfg.Seed^uint64(l.cfg.Worker)<<32, uint64(l.epoch)))
	rng.Shuffle(len(l.order), func(i, j int) { l.order[i], l.order[j] = l.order[j], l.order[i] })
	l.pos = 0
}

// PartitionLen is the number of samples in this worker's partition.
func (l *Loader) PartitionLen() int { return len(l.part) }

// BatchesPerEpoch is how many full batches one pass over the partition
// gives (at least 1).
func (l *Loader) BatchesPerEpoch() int { return max(1, len(l.part)/l.cfg.BatchSize) }

// Epoch is the number of completed passes over the partition.
func (l *Loader) Epoch() int { return l.epoch }

// Next fills x (BatchSize*prod(Shape) values) and labels (BatchSize) with
// the next mini-batch. A batch never straddles epochs: the samples left
// over at the end of a pass are skipped, except when the partition is
// smaller than one batch, in which case the batch wraps around.
func (l *Loader) Next(x []float32, labels []int) {
	size := prod(l.ds.Shape())
	bs := l.cfg.BatchSize
	if l.pos+bs > len(l.order) && l.pos > 0 {
		l.epoch++
		l.shuffle()
	}
	for i := range bs {
		if l.pos == len(l.order) {
			l.epoch++
			l.shuffle()
		}
		labels[i] = l.ds.Sample(l.order[l.pos], x[i*size:(i+1)*size])
		l.pos++
	}
}
