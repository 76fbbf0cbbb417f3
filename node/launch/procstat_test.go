package launch

import (
	"os"
	"runtime"
	"testing"
)

func TestReadProcStatOfSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	s, err := ReadProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.RSS <= 0 || s.PeakRSS < s.RSS || s.CPU < 0 {
		t.Fatalf("implausible %+v", s)
	}
}

func TestFitWorkers(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		nodes int
		avail int64
		want  int
	}{
		{4, 0, 4},          // unknown memory: every node trains
		{16, 20 * gib, 16}, // all fit
		{32, 20 * gib, 14}, // (20 GiB − 32 × 320 MiB) / (1 GiB − 320 MiB)
		{32, 1 * gib, 1},   // at least one trains
	} {
		if got := FitWorkers(tc.nodes, tc.avail); got != tc.want {
			t.Errorf("FitWorkers(%d, %d GiB) = %d, want %d", tc.nodes, tc.avail/gib, got, tc.want)
		}
	}
}
