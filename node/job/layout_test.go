package job

import (
	"fmt"
	"strings"
	"testing"

	"dsspmesh/cudaops"
)

func TestLayoutTextRoundTrip(t *testing.T) {
	m, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	text := FormatLayout(m.Layout())
	if text != "fc1.weight:256x784,fc1.bias:256,fc2.weight:128x256,fc2.bias:128,fc3.weight:10x128,fc3.bias:10" {
		t.Fatalf("mlp layout text %q", text)
	}
	l, err := ParseLayout(text + ",temp:")
	if err != nil {
		t.Fatal(err)
	}
	if l.Total() != m.NumParams()+1 || l[6].Name != "temp" || len(l[6].Shape) != 0 || l[6].Offset != m.NumParams() {
		t.Fatalf("parsed %v", l)
	}
	if err := CompareLayout(m.Layout(), l[:6]); err != nil {
		t.Fatalf("same layout: %v", err)
	}
}

// TestLayoutMismatchNamesTheFirstTensor: golden messages.
func TestLayoutMismatchNamesTheFirstTensor(t *testing.T) {
	job, _ := ParseLayout("fc1.weight:128x784,fc1.bias:128,fc2.weight:10x128,fc2.bias:10")
	for _, c := range []struct{ trainer, want string }{
		{"fc1.weight:128x784,fc1.bias:128,fc2.weight:10x64,fc2.bias:10",
			"layout mismatch at tensor 2 fc2.weight: shape [10 128] in the job, [10 64] in the trainer"},
		{"fc1.weight:128x784,fc1.bias:128,head.weight:10x128,fc2.bias:10",
			"layout mismatch at tensor 2: fc2.weight [10 128] in the job, head.weight [10 128] in the trainer"},
		{"fc1.weight:128x784,fc1.bias:128,fc2.weight:10x128",
			"layout mismatch at tensor 3: fc2.bias [10] in the job, missing in the trainer (it has 3 tensors)"},
		{"fc1.weight:128x784,fc1.bias:128,fc2.weight:10x128,fc2.bias:10,extra:3",
			"layout mismatch at tensor 4: the job has 4 tensors, the trainer has more (extra [3])"},
	} {
		tr, err := ParseLayout(c.trainer)
		if err != nil {
			t.Fatal(err)
		}
		if err := CompareLayout(job, tr); err == nil || err.Error() != c.want {
			t.Errorf("trainer %s:\n got %v\nwant %s", c.trainer, err, c.want)
		}
	}
}

func TestLayoutBounds(t *testing.T) {
	for text, want := range map[string]string{
		"":                              "empty",
		"a:2,a:3":                       `"a" named twice`,
		"a:0":                           "dimension 0",
		"a:2x-1":                        "dimension -1",
		"a b:2":                         "name holds",
		"a:2x":                          `dimension ""`,
		"a":                             "no ':'",
		"a:99999x99999":                 "more than",
		strings.Repeat("x", 300) + ":1": "name of 300 bytes",
	} {
		if _, err := ParseLayout(text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLayout(%.40q) = %v, want an error containing %q", text, err, want)
		}
	}
	// ~200 tensors with long names (a transformer's) fit the spec's bound,
	// and the spec stays well within the control channel's 64 KiB header.
	var parts []string
	for i := range 200 {
		parts = append(parts, fmt.Sprintf("transformer.encoder.layers.%d.self_attention.in_proj_weight:768x2304", i))
	}
	text := strings.Join(parts, ",")
	if _, err := ParseLayout(text); err != nil {
		t.Fatalf("200 tensors: %v", err)
	}
	s := DefaultSpec()
	s.Model, s.Layout, s.Shards = ExternalModel, text, 0
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s, err := ResolveShards(s); err != nil || s.Shards < 2 {
		t.Fatalf("ResolveShards: %d, %v", s.Shards, err)
	}
	b, _ := Marshal(s)
	if len(b) > 32<<10 {
		t.Fatalf("a spec with 200 tensors is %d bytes", len(b))
	}
	if _, err := Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	s.Model = "mlp"
	if err := s.Validate(); err == nil {
		t.Fatal("a built-in model with a layout accepted")
	}
}

// TestLayoutDtypesAndAliases: a trainer's model state — a bf16 weight, an
// int64 counter, a tied weight under two names — round-trips through the
// text form, and a trainer whose dtype or aliases differ is refused naming
// the tensor.
func TestLayoutDtypesAndAliases(t *testing.T) {
	text := "emb.weight:100x32=out.weight,w:4x4:BF16,bn.num_batches_tracked::I64,bn.running_mean:8"
	l, err := ParseLayout(text)
	if err != nil {
		t.Fatal(err)
	}
	if got := FormatLayout(l); got != text {
		t.Fatalf("round trip %q, want %q", got, text)
	}
	if l[0].Aliases[0] != "out.weight" || l[1].Dtype != "BF16" || l[2].DtypeOf() != "I64" || len(l[2].Shape) != 0 || l[3].DtypeOf() != "F32" || l.Total() != 3200+16+1+8 {
		t.Fatalf("parsed %+v", l)
	}
	f32, _ := ParseLayout("w:4:F32")
	if f32[0].Dtype != "" || FormatLayout(f32) != "w:4" {
		t.Fatalf("an explicit F32 is the default: %+v", f32)
	}
	for trainer, want := range map[string]string{
		"emb.weight:100x32=out.weight,w:4x4,bn.num_batches_tracked::I64,bn.running_mean:8": "layout mismatch at tensor 1 w: dtype BF16 in the job, F32 in the trainer",
		"emb.weight:100x32,w:4x4:BF16,bn.num_batches_tracked::I64,bn.running_mean:8":       "layout mismatch at tensor 0 emb.weight: aliases [out.weight] in the job, [] in the trainer",
	} {
		tr, err := ParseLayout(trainer)
		if err != nil {
			t.Fatal(err)
		}
		if err := CompareLayout(l, tr); err == nil || err.Error() != want {
			t.Errorf("trainer %s:\n got %v\nwant %s", trainer, err, want)
		}
	}
	for text, want := range map[string]string{
		"a:2:Q8":       `dtype "Q8"`,
		"a:2=b,b:3":    `"b" named twice`,
		"a:2=a":        `"a" named twice`,
		"a:2=":         "alias of 0 bytes",
		"a:2=x y":      "alias holds",
		"a:2:BF16:I64": `dtype "BF16:I64"`,
	} {
		if _, err := ParseLayout(text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLayout(%q) = %v, want an error containing %q", text, err, want)
		}
	}
}
