package cudaops

import (
	"math/rand/v2"
	"testing"
)

// TestOrderConsumesEverySampleOncePerEpoch: workers with uneven batches
// that change between rounds (the balance layer's allocations), each
// taking its slice of the round's global batch, consume every sample index
// exactly once per epoch.
func TestOrderConsumesEverySampleOncePerEpoch(t *testing.T) {
	const n = 1000
	o, err := NewOrder(n, 42)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	batches := []int64{47, 47, 23, 11} // B = 128, does not divide n
	const epochs = 5
	seen := make([][]int, epochs)
	for e := range seen {
		seen[e] = make([]int, n)
	}
	var start int64 // the stream position of the round
	for start < epochs*n {
		if rng.IntN(4) == 0 { // a re-allocation: the same global batch, other shares
			k, j := rng.IntN(4), rng.IntN(4)
			if batches[k] > 5 {
				batches[k] -= 5
				batches[j] += 5
			}
		}
		off := start
		for _, b := range batches {
			for p := off; p < off+b && p < epochs*n; p++ {
				seen[p/n][o.Index(p)]++
			}
			off += b
		}
		start = off
	}
	for e := range seen {
		for i, c := range seen[e] {
			if c != 1 {
				t.Fatalf("epoch %d: sample %d consumed %d times", e, i, c)
			}
		}
	}
	// Epochs are different permutations, the same on every node.
	o2, _ := NewOrder(n, 42)
	same := 0
	for p := range int64(n) {
		if o.Index(p) == o.Index(p+n) {
			same++
		}
		if o.Index(p) != o2.Index(p) {
			t.Fatalf("position %d differs between two orders of one seed", p)
		}
	}
	if same > n/10 {
		t.Fatalf("epochs 0 and 1 agree at %d of %d positions", same, n)
	}
}

func TestOrderFill(t *testing.T) {
	ds, err := NewSynthetic(SyntheticConfig{Samples: 50, Shape: []int{3}, Classes: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	o, _ := NewOrder(ds.Len(), 7)
	x, labels := make([]float32, 3*20), make([]int, 20)
	o.Fill(ds, 40, x, labels) // straddles the first epoch's end
	want := make([]float32, 3)
	for i := range labels {
		l := ds.Sample(o.Index(40+int64(i)), want)
		if l != labels[i] || want[0] != x[3*i] || want[2] != x[3*i+2] {
			t.Fatalf("sample %d differs", i)
		}
	}
	if _, err := NewOrder(0, 1); err == nil {
		t.Fatal("an order of nothing")
	}
}

// TestSampleWeightedGradientsEqualTheUnion is the balance layer's
// aggregation: four workers with batches 47/47/23/11 (speeds 1,1,2,4),
// each computing the mean gradient of its slice of the round, combined as
// Σ b_i·g_i / Σ b_i, give the gradient one process computes on the union
// of their 128 samples, to float tolerance. Averaging them with weight 1/n
// (what a mesh of equal batches does) is a different, biased gradient.
func TestSampleWeightedGradientsEqualTheUnion(t *testing.T) {
	ds, err := NewSynthetic(DefaultSyntheticConfig())
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewModel("mlp", ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	theta := m.Init(3)
	o, _ := NewOrder(ds.Len(), 5)
	size := m.InputSize()
	const total = 128
	x, labels := make([]float32, total*size), make([]int, total)
	o.Fill(ds, 1000, x, labels)
	union := make([]float32, m.NumParams())
	if _, err := m.Gradient(theta, x, labels, union); err != nil {
		t.Fatal(err)
	}
	weighted := make([]float64, m.NumParams())
	equal := make([]float64, m.NumParams())
	g := make([]float32, m.NumParams())
	batches := []int{47, 47, 23, 11}
	off := 0
	for _, b := range batches {
		if _, err := m.Gradient(theta, x[off*size:(off+b)*size], labels[off:off+b], g); err != nil {
			t.Fatal(err)
		}
		for j, v := range g {
			weighted[j] += float64(b) * float64(v) / total
			equal[j] += float64(v) / float64(len(batches))
		}
		off += b
	}
	var errW, errE, norm float64
	for j, u := range union {
		errW = max(errW, abs64(weighted[j]-float64(u)))
		errE = max(errE, abs64(equal[j]-float64(u)))
		norm = max(norm, abs64(float64(u)))
	}
	if errW > 1e-5*norm {
		t.Fatalf("sample-weighted gradient differs from the union's by %g (max |g| %g)", errW, norm)
	}
	if errE < 1e-3*norm {
		t.Fatalf("the 1/n-weighted control matches the union (%g): the test cannot tell weightings apart", errE)
	}
	t.Logf("max |Δ|: weighted %.2g, 1/n control %.2g, max |g| %.2g", errW, errE, norm)
}

func abs64(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
