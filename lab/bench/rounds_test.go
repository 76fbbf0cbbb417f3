package bench

import (
	"slices"
	"testing"
	"time"

	"dsspmesh/node/launch"
	"dsspmesh/node/records"
)

func TestVariantLocalSteps(t *testing.T) {
	got := WithLocalSteps([]Variant{"bsp", "dssp:3:12"}, []int{1, 4, 16})
	want := []Variant{"bsp", "bsp+h4", "bsp+h16", "dssp:3:12", "dssp:3:12+h4", "dssp:3:12+h16"}
	if !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
	args, err := Variant("ssp:1+balance+h16").specArgs()
	if err != nil || !slices.Equal(args, []string{"--paradigm", "ssp", "--balance=true", "--local-steps", "16", "--s-lower", "1"}) {
		t.Fatalf("args %v, %v", args, err)
	}
	if h := Variant("ssp:1+balance+h16").LocalSteps(); h != 16 {
		t.Fatalf("local steps %d", h)
	}
	if _, err := Variant("bsp+hx").specArgs(); err == nil {
		t.Fatal("+hx accepted")
	}
}

// TestThroughput: samples/s over the window where every node computed,
// push bytes per sample, and the share of the workers' own capacity,
// each worker's rate taken over the same window (node 0's first second,
// slower, is outside it).
func TestThroughput(t *testing.T) {
	w := func(iter, samples, bytes uint64, compute float64) records.LocalWorker {
		return records.LocalWorker{Iter: iter, Samples: samples, PushBytes: bytes, ComputeSeconds: compute}
	}
	s := []launch.Sample{
		{Elapsed: time.Second, Node: 0, Up: true, Worker: w(1, 64, 1000, 0.1)},
		{Elapsed: time.Second, Node: 1, Up: true, Worker: w(0, 0, 0, 0)},
		{Elapsed: 2 * time.Second, Node: 0, Up: true, Worker: w(2, 128, 2000, 0.2)},
		{Elapsed: 2 * time.Second, Node: 1, Up: true, Worker: w(1, 64, 1000, 0.1)},
		{Elapsed: 4 * time.Second, Node: 0, Up: true, Worker: w(4, 256, 4000, 1)},
		{Elapsed: 4 * time.Second, Node: 1, Up: true, Worker: w(3, 192, 3000, 1)},
	}
	perSec, bps, busy := throughput(s)
	if capacity := 128/0.8 + 128/0.9; perSec != (448-192)/2.0 || bps != 7000.0/448 || busy != perSec/capacity {
		t.Fatalf("samples/s %g, bytes/sample %g, busy %g", perSec, bps, busy)
	}
	// Samples by an evaluation: the last poll at or before it, every node;
	// a node down at that poll keeps its count from the poll before.
	s = append(s, launch.Sample{Elapsed: 5 * time.Second, Node: 0, Up: true, Worker: w(5, 320, 0, 1)},
		launch.Sample{Elapsed: 5 * time.Second, Node: 1})
	got := samplesAt(s, []time.Duration{1500 * time.Millisecond, 2 * time.Second, NotReached, 5 * time.Second, time.Hour})
	if want := []float64{64, 192, 0, 320 + 192, 320 + 192}; !slices.Equal(got, want) {
		t.Fatalf("samples at the evaluations: %v, want %v", got, want)
	}
}
