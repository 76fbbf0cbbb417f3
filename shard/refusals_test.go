package shard

import (
	"slices"
	"testing"
	"time"

	"dsspmesh/internal/pace"
	"dsspmesh/mesh"
)

// TestRefusalsLogFirstThenOncePerInterval: a peer refused every second
// is logged at its first refusal and then once a minute, with the count of
// the refusals left out; another peer has its own allowance.
func TestRefusalsLogFirstThenOncePerInterval(t *testing.T) {
	r := pace.Pacer[mesh.NodeID]{Every: refusalLogEvery} // as NewReplica sets it
	t0 := time.Unix(1_000, 0)
	var got [][2]int // second, unlogged
	for s := range 125 {
		if log, unlogged, _ := r.Note("n9", t0.Add(time.Duration(s)*time.Second)); log {
			got = append(got, [2]int{s, unlogged})
		}
	}
	if want := [][2]int{{0, 0}, {60, 59}, {120, 59}}; !slices.Equal(got, want) {
		t.Fatalf("warnings (second, unlogged) %v, want %v", got, want)
	}
	if log, _, _ := r.Note("n8", t0.Add(10*time.Second)); !log {
		t.Fatal("first refusal of another peer not logged")
	}
}
