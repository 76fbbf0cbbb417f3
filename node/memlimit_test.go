package node

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"dsspmesh/shardapi"
)

func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]int64{"auto": MemoryLimitAuto, "off": MemoryLimitOff, "0": MemoryLimitOff, "512": 512 << 20, "600MiB": 600 << 20} {
		if got, err := ParseMemoryLimit(in); err != nil || got != want {
			t.Errorf("ParseMemoryLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"-3", "lots", "1.5"} {
		if _, err := ParseMemoryLimit(in); err == nil || !strings.Contains(err.Error(), "--memory-limit") {
			t.Errorf("ParseMemoryLimit(%q) = %v, want an error naming the flag", in, err)
		}
	}
	c := DefaultConfig()
	fs := pflag.NewFlagSet("node", pflag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse([]string{"--memory-limit", "256"}); err != nil || c.MemoryLimit != 256<<20 {
		t.Fatalf("--memory-limit 256: %d, %v", c.MemoryLimit, err)
	}
}

// TestAutoMemoryLimit: the MLP on MNIST gets about 120 MiB, a 100 MB model
// room for its parameters, its gradient's encodings, shards and a slice in
// flight: half a model less under int8 than under fp32.
func TestAutoMemoryLimit(t *testing.T) {
	mlp := autoMemoryLimit(4*235146, 47_040_000+7_840_000+70_000, 8, shardapi.INT8, roundsMemory{})
	if mlp < 100<<20 || mlp > 140<<20 {
		t.Errorf("MLP on MNIST: limit %d MiB", mlp>>20)
	}
	const model = 4 * 24_901_642
	wide := autoMemoryLimit(model, 9_408_000, 8, shardapi.INT8, roundsMemory{})
	if wide < 4*model || wide > 5*model {
		t.Errorf("mlp-wide under int8: limit %d MiB", wide>>20)
	}
	if d := autoMemoryLimit(model, 9_408_000, 8, shardapi.FP32, roundsMemory{}) - wide; d < model/2-model/50 || d > model/2 {
		t.Errorf("mlp-wide: fp32's limit %d MiB above int8's, want half the model", d>>20)
	}
	// Local rounds: the worker's round copy (1 model), the shards' outer
	// buffer and its copy in a snapshot (1.5); an external trainer's node
	// only the buffer.
	rounds := autoMemoryLimit(model, 9_408_000, 8, shardapi.INT8, roundsMemory{steps: true, outerBuf: true})
	if d := rounds - wide; d < 2.5*model || d > 2.5*model+1 {
		t.Errorf("mlp-wide in local rounds: limit %d MiB, %d MiB above without rounds", rounds>>20, d>>20)
	}
	if d := autoMemoryLimit(model, 0, 8, shardapi.INT8, roundsMemory{outerBuf: true}) - autoMemoryLimit(model, 0, 8, shardapi.INT8, roundsMemory{}); d < 1.5*model || d > 1.5*model+1 {
		t.Errorf("outer buffer alone: %d MiB more", d>>20)
	}
}
