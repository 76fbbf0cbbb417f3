package test

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
	"dsspmesh/modelfile/modelfiletest"
	"dsspmesh/node/job"
	"dsspmesh/node/records"
)

// TestModelOutAndIn is the model's way out of the mesh and back in, on
// real processes: two nodes train the MLP with checkpoints on; the
// evaluator's snapshot (dssp export --evaluated) evaluated by dssp eval
// gives the accuracy the mesh reported for it; a fresh export from the
// other node states every shard's clocks and is read by the numpy-only
// reader; the evaluator's checkpoint folder keeps at most --checkpoint-keep
// files; and a new mesh bootstrapped with --init-from that export serves
// exactly its parameters.
func TestModelOutAndIn(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	bin := Binary(t)
	tmp := t.TempDir()
	const evalSamples = 2000
	c := NewCluster(t, 2,
		[]string{"--threads", "1", "--eval-every", "1s", "--eval-samples", strconv.Itoa(evalSamples), "--log-level", "warn",
			"--checkpoint-every", "1s", "--checkpoint-keep", "2"},
		[]string{"--model", "mlp", "--paradigm", "dssp", "--s-lower", "3", "--r-max", "12"})
	for i := range c.Mesh.Procs {
		c.Mesh.AddArgs(i, "--checkpoint-dir", filepath.Join(tmp, fmt.Sprintf("ckpt%d", i)))
	}
	c.Start(0)
	c.Start(1)

	var evaluator int
	c.WaitFor("an evaluation above 60%", 120*time.Second, func() bool {
		st := c.Statuses()
		a := Accuracy(st)
		if a == nil || a.Accuracy < 0.6 {
			return false
		}
		for i, s := range st {
			if s != nil && s.Node == a.By {
				evaluator = i
				return true
			}
		}
		return false
	})
	other := 1 - evaluator

	// The evaluated snapshot reproduces the accuracy the mesh reported.
	evaluated := filepath.Join(tmp, "evaluated.safetensors")
	runDssp(t, bin, "export", "--node", c.Mesh.Procs[evaluator].HTTP, "--evaluated", "--out", evaluated)
	ef, err := modelfile.ReadFile(evaluated)
	if err != nil {
		t.Fatal(err)
	}
	if ef.Meta.Source != "evaluation" || ef.Meta.Eval == nil || ef.Meta.Eval.Samples != evalSamples {
		t.Fatalf("evaluated snapshot's metadata %+v", ef.Meta)
	}
	st, err := c.Status(evaluator)
	if err != nil {
		t.Fatal(err)
	}
	var reported *records.EvalResult
	for i := range st.EvalHistory {
		e := &st.EvalHistory[i]
		if e.Iter == uint64(ef.Meta.Clock) && e.Accuracy == ef.Meta.Eval.Accuracy {
			reported = e
		}
	}
	if reported == nil {
		t.Fatalf("no evaluation the mesh reported matches the snapshot (clock %d, accuracy %.4f): %+v", ef.Meta.Clock, ef.Meta.Eval.Accuracy, st.EvalHistory)
	}
	out := runDssp(t, bin, "eval", "--model", evaluated, "--eval-samples", strconv.Itoa(evalSamples), "--threads", "1")
	m := regexp.MustCompile(`test accuracy [0-9.]+% \((\d+)/(\d+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("dssp eval printed no accuracy:\n%s", out)
	}
	correct, _ := strconv.Atoi(m[1])
	total, _ := strconv.Atoi(m[2])
	got := float64(correct) / float64(total)
	t.Logf("mesh reported %.4f at clock %d; dssp eval on the exported file: %.4f (%d/%d)", reported.Accuracy, reported.Iter, got, correct, total)
	if total != evalSamples || math.Abs(got-reported.Accuracy) > 0.001 {
		t.Fatalf("dssp eval: %.4f on %d samples, the mesh reported %.4f on %d", got, total, reported.Accuracy, evalSamples)
	}

	// A fresh export from the node that does not evaluate.
	fresh := filepath.Join(tmp, "fresh.safetensors")
	runDssp(t, bin, "export", "--node", c.Mesh.Procs[other].HTTP, "--out", fresh)
	ff, err := modelfile.ReadFile(fresh)
	if err != nil {
		t.Fatal(err)
	}
	mlp, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	meta := ff.Meta
	if meta.Source != "export" || meta.Model != "mlp" || meta.Eval != nil || len(meta.Shards) != job.DefaultSpec().WithShards(mlp.NumParams()).Shards || meta.Clock < ef.Meta.Clock {
		t.Fatalf("fresh export's metadata %+v (evaluated snapshot at clock %d)", meta, ef.Meta.Clock)
	}
	for _, sc := range meta.Shards {
		if sc.Leader == "" || sc.Min < meta.Clock || sc.Max < sc.Min || sc.Index == 0 {
			t.Fatalf("shard clocks %+v, mesh clock %d", sc, meta.Clock)
		}
	}
	theta, err := ff.Params(mlp.Layout())
	if err != nil {
		t.Fatal(err)
	}
	t.Run("numpy", func(t *testing.T) {
		modelfiletest.CheckWithNumpy(t, fresh, mlp.Layout(), theta, map[string]string{
			"format": modelfile.Format, "model": "mlp", "dataset": "mnist", "source": "export", "clock": strconv.FormatInt(meta.Clock, 10)})
	})

	// Checkpoints: written by the node that evaluated the state, at most
	// --checkpoint-keep of them. The lease can move between the two nodes
	// (the lowest id among shard 0's workers with a push applied), so the
	// checkpoints are found in whichever folder grows, and every file is
	// matched to an evaluation its own node reported.
	ckpts := func() [][]string {
		out := make([][]string, len(c.Mesh.Procs))
		for i := range out {
			out[i], _ = filepath.Glob(filepath.Join(tmp, fmt.Sprintf("ckpt%d", i), "ckpt-*.safetensors"))
		}
		return out
	}
	seen := map[string]bool{}
	c.WaitFor("two checkpoints in one folder", 60*time.Second, func() bool {
		all := ckpts()
		if !slices.ContainsFunc(all, func(f []string) bool { return len(f) >= 2 }) {
			return false
		}
		for _, p := range slices.Concat(all...) {
			seen[p] = true
		}
		return true
	})
	// Rotation (--checkpoint-keep): a file none of the folders held before,
	// in whichever folder the lease holder writes to now.
	writer := -1
	c.WaitFor("a later checkpoint", 60*time.Second, func() bool {
		for i, f := range ckpts() {
			if len(f) > 0 && !seen[f[len(f)-1]] {
				writer = i
				return true
			}
		}
		return false
	})
	if writer != evaluator {
		t.Logf("the evaluation lease moved from node%d to node%d", evaluator, writer)
	}
	// A rotation writes the new file before it removes the oldest, so a
	// listing can catch keep+1 for a moment, and a listed file can be gone
	// when it is read.
	var kept [][]string
	c.WaitFor("at most --checkpoint-keep (2) checkpoints in each folder", 10*time.Second, func() bool {
		kept = ckpts()
		return !slices.ContainsFunc(kept, func(f []string) bool { return len(f) > 2 })
	})
	for i, files := range kept {
		if len(files) == 0 {
			continue
		}
		st, err := c.Status(i)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			cf, err := modelfile.ReadFile(f)
			if errors.Is(err, fs.ErrNotExist) {
				continue // rotated away since the listing
			}
			if err != nil {
				t.Fatal(err)
			}
			if cf.Meta.Source != "checkpoint" || cf.Meta.Eval == nil {
				t.Fatalf("checkpoint %s metadata %+v", f, cf.Meta)
			}
			own := false
			for _, e := range st.EvalHistory {
				own = own || e.By == st.Node && e.Iter == uint64(cf.Meta.Clock) && e.Accuracy == cf.Meta.Eval.Accuracy
			}
			if !own {
				t.Fatalf("node%d wrote checkpoint %s (clock %d, accuracy %.4f) of no evaluation it made: %+v", i, f, cf.Meta.Clock, cf.Meta.Eval.Accuracy, st.EvalHistory)
			}
		}
	}
	if st, err := c.Status(writer); err != nil || filepath.Dir(st.Checkpoint) != filepath.Join(tmp, fmt.Sprintf("ckpt%d", writer)) {
		t.Fatalf("node%d's /status names checkpoint %q (%v)", writer, st.Checkpoint, err)
	}

	// A new mesh started from the export holds exactly its parameters.
	fromFile := NewCluster(t, 1, []string{"--train=false", "--log-level", "warn"},
		[]string{"--model", "mlp", "--init-from", fresh})
	fromFile.Start(0)
	back := filepath.Join(tmp, "back.safetensors")
	runDssp(t, bin, "export", "--node", fromFile.Mesh.Procs[0].HTTP, "--out", back)
	bf, err := modelfile.ReadFile(back)
	if err != nil {
		t.Fatal(err)
	}
	backTheta, err := bf.Params(mlp.Layout())
	if err != nil {
		t.Fatal(err)
	}
	for i := range theta {
		if math.Float32bits(backTheta[i]) != math.Float32bits(theta[i]) {
			t.Fatalf("mesh started --init-from the export: parameter %d is %v, the file's %v", i, backTheta[i], theta[i])
		}
	}
	if bf.Meta.Clock != 0 {
		t.Fatalf("a fresh mesh's clock is %d", bf.Meta.Clock)
	}
}

// runDssp runs the dssp binary and returns its output, failing t on an error.
func runDssp(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dssp %v: %v\n%s", args, err, out)
	}
	t.Logf("dssp %v:\n%s", args, out)
	return string(out)
}

// TestModelBadInputIsOneClearLine: the model commands fail fast with one
// line naming the problem, write nothing, and never hang.
func TestModelBadInputIsOneClearLine(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out.safetensors")

	t.Run("export from no node", func(t *testing.T) {
		port := freePorts(t)[0]
		got := runFail(t, 20*time.Second, "export", "--node", "127.0.0.1:"+strconv.Itoa(port), "--timeout", "1s", "--out", out)
		if !strings.Contains(got, "export:") || !strings.Contains(got, "connection refused") {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("export from a node that never answers", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		got := runFail(t, 30*time.Second, "export", "--node", ln.Addr().String(), "--timeout", "1s", "--out", out)
		if !strings.Contains(got, "context deadline exceeded") {
			t.Fatalf("got %q", got)
		}
	})
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("a failed export left %s (%v)", out, err)
	}

	t.Run("eval of a missing file", func(t *testing.T) {
		got := runFail(t, 20*time.Second, "eval", "--model", filepath.Join(dir, "missing.safetensors"))
		if !strings.Contains(got, "--model") || !strings.Contains(got, "missing.safetensors") {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("eval of a file that is not safetensors", func(t *testing.T) {
		junk := filepath.Join(dir, "junk.safetensors")
		os.WriteFile(junk, []byte("\x10\x00\x00\x00\x00\x00\x00\x00{not json}      "), 0o644)
		got := runFail(t, 20*time.Second, "eval", "--model", junk)
		if !strings.Contains(got, "not a valid safetensors file") {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("init from another model", func(t *testing.T) {
		lenet, err := cudaops.NewModel("lenet", cudaops.ModelOptions{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "lenet.safetensors")
		if err := modelfile.WriteFile(path, lenet.Layout(), lenet.Init(1), modelfile.Meta{Model: "lenet"}); err != nil {
			t.Fatal(err)
		}
		args := nodeArgs(t, keygen(t), freePorts(t), "--model", "mlp", "--init-from", path)
		got := runFail(t, 20*time.Second, args...)
		if !strings.Contains(got, "--init-from") || !strings.Contains(got, "holds model lenet, not mlp") {
			t.Fatalf("got %q", got)
		}
		if _, err := os.Stat(args[2]); !os.IsNotExist(err) {
			t.Fatalf("a refused --init-from left the data dir %s (%v)", args[2], err)
		}
	})
}
