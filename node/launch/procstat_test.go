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
