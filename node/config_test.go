package node

import (
	"dsspmesh/node/job"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigValidateNamesTheBadValue(t *testing.T) {
	cases := []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Host = "0.0.0.0" }, "--host 0.0.0.0"},
		{func(c *Config) { c.Host = "nohost" }, `--host "nohost"`},
		{func(c *Config) { c.GossipPort = 70000 }, "--gossip-port 70000"},
		{func(c *Config) { c.KeyFile = "" }, "--key FILE is required"},
		{func(c *Config) { c.Slowdown = 0.5 }, "--slowdown 0.5"},
		{func(c *Config) { c.Join = []string{"nope"} }, `--join "nope"`},
		{func(c *Config) { c.Detection = "slow" }, `--detection "slow"`},
		{func(c *Config) { c.Backend = "tpu" }, `--backend "tpu"`},
		{func(c *Config) { c.LogLevel = "loud" }, `--log-level "loud"`},
		{func(c *Config) { c.Spec.Model = "resnet" }, `--model "resnet" unknown`},
		{func(c *Config) { c.Trainer = "pytorch" }, `--trainer "pytorch" must be builtin or external`},
		{func(c *Config) { c.Spec.Model, c.Spec.Dataset = "external", "my data" }, `--dataset "my data": for --model external`},
		{func(c *Config) { c.Spec.Model, c.Spec.Layout = "external", "w:2,w:3" }, `layout: tensor "w" named twice`},
		{func(c *Config) { c.Spec.Layout = "w:2" }, "a layout is for --model external only"},
		{func(c *Config) { c.Spec.Paradigm = "fast" }, `--paradigm "fast" unknown`},
		{func(c *Config) { c.Spec.Paradigm = "dssp"; c.Spec.RMax = -1 }, "--paradigm"},
		{func(c *Config) { c.Spec.Optimizer = "sgd" }, "--momentum 0.9 needs --optimizer momentum"},
		{func(c *Config) { c.Spec.Shards = -1 }, "--shards -1 outside 0..1024"},
		{func(c *Config) { c.Spec.Shards = 1025 }, "--shards 1025"},
		{func(c *Config) { c.Spec.Replication = 9 }, "--replication 9"},
		{func(c *Config) { c.Spec.BatchSize = -2 }, "--batch -2"},
		{func(c *Config) { c.Slowdown = math.Inf(1) }, "--slowdown +Inf: must be a finite number in [1, 1000]"},
		{func(c *Config) { c.Slowdown = 1e12 }, "--slowdown 1e+12: must be a finite number in [1, 1000]"},
		{func(c *Config) { c.Slowdown = math.NaN() }, "--slowdown NaN"},
		{func(c *Config) { c.ComputeDelay = 1e6 * time.Hour }, "--compute-delay 1000000h0m0s: must be in [0s, 1h0m0s]"},
		{func(c *Config) { c.ComputeDelay = -time.Second }, "--compute-delay -1s"},
		{func(c *Config) { c.EvalEvery = time.Nanosecond }, "--eval-every 1ns"},
		{func(c *Config) { c.AuditFraction = 1.5 }, "--audit-fraction 1.5: must be within [0, 1]"},
		{func(c *Config) { c.AuditFraction = math.NaN() }, "--audit-fraction NaN"},
		{func(c *Config) { c.Spec.LR = math.Inf(1) }, "--lr +Inf: must be a finite number in (0, 100]"},
		{func(c *Config) { c.Spec.LR = 1e30 }, "--lr 1e+30"},
		{func(c *Config) { c.Spec.LR = 0 }, "--lr 0"},
		{func(c *Config) { c.Spec.Momentum = math.NaN() }, "--momentum NaN"},
		{func(c *Config) { c.Spec.LRDecay = math.Inf(-1) }, "--lr-decay -Inf"},
		{func(c *Config) { c.Spec.OutlierFactor = 1.5 }, "--outlier-factor 1.5: must be a finite number in [2, 1e+06], or 0 (the default, 100)"},
		{func(c *Config) { c.KeyFile = ""; c.Insecure = true; c.Host = "10.0.0.1" }, "--insecure with --host 10.0.0.1"},
		{func(c *Config) { c.InsecurePublic = true }, "--insecure-public only makes sense with --insecure"},
		{func(c *Config) { c.Pprof = true; c.HTTPAddr = "0.0.0.0:7948" }, "--pprof with --http-addr 0.0.0.0:7948"},
		{func(c *Config) { c.Pprof = true; c.HTTPAddr = ":7948" }, "--pprof with --http-addr :7948"},
		{func(c *Config) { c.CheckpointDir = "ckpt"; c.CheckpointEvery = 0 }, "--checkpoint-every 0s"},
		{func(c *Config) { c.CheckpointDir = "ckpt"; c.CheckpointKeep = 0 }, "--checkpoint-keep 0"},
	}
	for _, tc := range cases {
		c := DefaultConfig()
		c.KeyFile = "mesh.key"
		if err := c.Validate(); err != nil {
			t.Fatalf("default config: %v", err)
		}
		tc.change(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want error containing %q, got %v", tc.want, err)
		}
	}
}

func TestSpecAdoptConflicts(t *testing.T) {
	meshSpec := job.DefaultSpec()
	mine := meshSpec
	mine.Model, mine.Shards = "lenet", 8
	explicit := map[string]bool{"model": true}
	err := mine.CheckAdopt(meshSpec, func(f string) bool { return explicit[f] })
	var ce *job.ConflictError
	if !errors.As(err, &ce) || len(ce.Flags) != 1 || ce.Flags[0] != "--model lenet (mesh: mlp)" {
		t.Fatalf("want one conflict on --model, got %v", err)
	}
	// A non-explicit difference (a default) is adopted silently, and an
	// explicit flag equal to the mesh's value is fine.
	explicit = map[string]bool{"paradigm": true}
	if err := mine.CheckAdopt(meshSpec, func(f string) bool { return explicit[f] }); err != nil {
		t.Fatalf("no conflict expected: %v", err)
	}
	// An explicit --shards 0 (auto) takes whatever count the mesh resolved.
	auto, resolved := job.DefaultSpec(), job.DefaultSpec()
	resolved.Shards = 3
	if err := auto.CheckAdopt(resolved, func(f string) bool { return f == "shards" }); err != nil {
		t.Fatalf("--shards 0 against a mesh of 3: %v", err)
	}
}

func TestSpecRoundTripAndPolicy(t *testing.T) {
	s := job.DefaultSpec()
	b, err := job.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := job.Unmarshal(b)
	if err != nil || got != s {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if _, err := job.Unmarshal([]byte(`{"model":"mlp"}`)); err == nil {
		t.Fatal("a spec missing fields must not validate")
	}
	for p, want := range map[string]string{"bsp": "bsp", "asp": "asp", "ssp": "ssp:3", "dssp": "dssp:3:12", "dssp-paper": "dssp-paper:3:12"} {
		s.Paradigm = p
		if s.PolicyText() != want {
			t.Errorf("%s: %s", p, s.PolicyText())
		}
		if _, err := s.Policy(); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

func TestConfigAcceptsTheEdgesOfEachRange(t *testing.T) {
	for _, change := range []func(*Config){
		func(c *Config) { c.Slowdown = MaxSlowdown },
		func(c *Config) { c.ComputeDelay = MaxComputeDelay },
		func(c *Config) { c.Spec.LR = job.MaxLR },
		func(c *Config) { c.Spec.OutlierFactor = 2 },
		func(c *Config) { c.KeyFile = ""; c.Insecure = true; c.Host = "10.0.0.1"; c.InsecurePublic = true },
		func(c *Config) { c.Pprof = true; c.HTTPAddr = "localhost:7948" },
		func(c *Config) { c.Pprof = true; c.HTTPAddr = "[::1]:7948" },
	} {
		c := DefaultConfig()
		c.KeyFile = "mesh.key"
		change(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("valid config refused: %v", err)
		}
	}
}

func TestParseFloatsRefusesNonFinite(t *testing.T) {
	if got, err := ParseFloats("slowdown", "1, 1,2,4"); err != nil || len(got) != 4 || got[3] != 4 {
		t.Fatalf("1,1,2,4: %v %v", got, err)
	}
	for _, bad := range []string{"1,inf", "NaN", "1,,2", "x"} {
		if _, err := ParseFloats("slowdown", bad); err == nil || !strings.Contains(err.Error(), "--slowdown") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// An HTTP address other than loopback is warned about at start: it
// serves the dashboard, /status and the model to the network with no
// authentication.
func TestHTTPExposureWarning(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:7948", "[::1]:7948", "localhost:7948", "127.0.0.2:80"} {
		if w := HTTPExposureWarning(addr); w != "" {
			t.Errorf("%s: warned %q, want nothing for a loopback address", addr, w)
		}
	}
	for _, addr := range []string{"0.0.0.0:7948", "[::]:7948", ":7948", "10.0.0.5:7948", "node1.example:7948"} {
		if w := HTTPExposureWarning(addr); !strings.Contains(w, addr) || !strings.Contains(w, "no authentication") || !strings.Contains(w, "model") {
			t.Errorf("%s: warned %q, want the address named, the model and no authentication", addr, w)
		}
	}
}
