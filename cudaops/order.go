package cudaops

import (
	"fmt"
	"math/rand/v2"
)

// Order is a job-wide data order for workers whose batches differ (the
// balance layer): the training set's epochs laid end to end as one stream
// of sample indices, epoch e being a permutation of [0, n) seeded by
// (seed, e). Position p of the stream is sample perm_{p / n}[p mod n].
//
// Workers that take disjoint ranges of positions — round r's global batch
// is the positions [start_r, start_r + B_r), and worker i takes the b_i of
// them at its offset (the batches of the workers before it) — consume every
// sample exactly once per epoch whatever the batches, unlike a fixed equal
// partition per worker, over which a faster worker's larger batches would
// over-sample its part. Every node computing the same position gets the
// same sample. An Order is not safe for concurrent use.
type Order struct {
	n    int
	seed uint64
	// the two most recent epochs' permutations: a batch straddles at most
	// one boundary
	epochs [2]int64
	perms  [2][]int32
}

// NewOrder returns the order of a set of n samples.
func NewOrder(n int, seed uint64) (*Order, error) {
	if n <= 0 || int64(n) > 1<<31-1 {
		return nil, fmt.Errorf("cudaops: an order of %d samples", n)
	}
	return &Order{n: n, seed: seed, epochs: [2]int64{-1, -1}}, nil
}

// Len is the number of samples of an epoch.
func (o *Order) Len() int { return o.n }

// Index is the sample at stream position pos (pos ≥ 0).
func (o *Order) Index(pos int64) int {
	n := int64(o.n)
	e := pos / n
	return int(o.perm(e)[pos%n])
}

func (o *Order) perm(e int64) []int32 {
	for k := range o.epochs {
		if o.epochs[k] == e {
			return o.perms[k]
		}
	}
	// Replace the older of the two (the lower epoch).
	k := 0
	if o.epochs[1] < o.epochs[0] {
		k = 1
	}
	p := o.perms[k]
	if len(p) != o.n {
		p = make([]int32, o.n)
	}
	for i := range p {
		p[i] = int32(i)
	}
	rng := rand.New(rand.NewPCG(o.seed, 0x6f72646572<<20^uint64(e)))
	rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
	o.epochs[k], o.perms[k] = e, p
	return p
}

// Fill writes the len(labels) samples at positions [pos, pos+len(labels))
// of the stream into x (len(labels)·prod(Shape) values) and labels.
func (o *Order) Fill(ds Dataset, pos int64, x []float32, labels []int) {
	size := prod(ds.Shape())
	for i := range labels {
		labels[i] = ds.Sample(o.Index(pos+int64(i)), x[i*size:(i+1)*size])
	}
}
