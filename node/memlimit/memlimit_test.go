package memlimit

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"dsspmesh/shardapi"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{"auto": Auto, "off": Off, "0": Off, "512": 512 << 20, "600MiB": 600 << 20} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"-3", "lots", "1.5"} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), "--memory-limit") {
			t.Errorf("Parse(%q) = %v, want an error naming the flag", in, err)
		}
	}
	v := int64(Auto)
	fs := pflag.NewFlagSet("node", pflag.ContinueOnError)
	fs.Var(Flag{&v}, "memory-limit", "")
	if err := fs.Parse([]string{"--memory-limit", "256"}); err != nil || v != 256<<20 {
		t.Fatalf("--memory-limit 256: %d, %v", v, err)
	}
	if s := (Flag{&v}).String(); s != "256" {
		t.Errorf("String() = %q, want 256", s)
	}
}

// TestFor: the MLP on MNIST gets about 120 MiB, a 100 MB model room for
// its parameters, its gradient's encodings, shards and a slice in flight:
// half a model less under int8 than under fp32.
func TestFor(t *testing.T) {
	mlp := For(4*235146, 47_040_000+7_840_000+70_000, 8, shardapi.INT8, Rounds{})
	if mlp < 100<<20 || mlp > 140<<20 {
		t.Errorf("MLP on MNIST: limit %d MiB", mlp>>20)
	}
	const model = 4 * 24_901_642
	wide := For(model, 9_408_000, 8, shardapi.INT8, Rounds{})
	if wide < 4*model || wide > 5*model {
		t.Errorf("mlp-wide under int8: limit %d MiB", wide>>20)
	}
	if d := For(model, 9_408_000, 8, shardapi.FP32, Rounds{}) - wide; d < model/2-model/50 || d > model/2 {
		t.Errorf("mlp-wide: fp32's limit %d MiB above int8's, want half the model", d>>20)
	}
	// Local rounds: the worker's round copy (1 model), the outer
	// Nesterov's headroom (1.5); an external trainer's node only the
	// headroom.
	rounds := For(model, 9_408_000, 8, shardapi.INT8, Rounds{Steps: true, Outer: true})
	if d := rounds - wide; d < 2.5*model || d > 2.5*model+1 {
		t.Errorf("mlp-wide in local rounds: limit %d MiB, %d MiB above without rounds", rounds>>20, d>>20)
	}
	if d := For(model, 0, 8, shardapi.INT8, Rounds{Outer: true}) - For(model, 0, 8, shardapi.INT8, Rounds{}); d < 1.5*model || d > 1.5*model+1 {
		t.Errorf("outer headroom alone: %d MiB more", d>>20)
	}
}
