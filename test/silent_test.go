package test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"dsspmesh/node/records"
)

// The no-silent-failure cases of issue 45 with real processes: a trainer
// that cannot start ends dssp up at once with its error; a trainer whose
// updates the shards refuse is told why by an exception; a setting that
// does not train is flagged within three evaluations.

// TestTrainerThatCannotStartEndsUp: a trainer whose Python lacks torch
// exits at once; dssp up ends within 15 s with the trainer's last lines
// and the package to install, instead of waiting for its time limit.
func TestTrainerThatCannotStartEndsUp(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	bin := Binary(t)
	trainer := `echo "Traceback (most recent call last):" >&2; echo "ModuleNotFoundError: No module named 'torch'" >&2; exit 1`
	start := time.Now()
	cmd := exec.Command(bin, "up", "--nodes", "2", "--trainer", trainer, "--time-limit", "5m", "--dir", t.TempDir())
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err == nil {
		t.Fatalf("dssp up succeeded with a trainer that exits:\n%s", out)
	}
	for _, want := range []string{"exited (exit status 1) while its node runs", "No module named 'torch'", "apt-get install python3-torch"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("dssp up's output lacks %q:\n%s", want, out)
		}
	}
	if took > 15*time.Second {
		t.Errorf("dssp up ended %v after its start, want within 15 s", took.Round(time.Second))
	}
	t.Logf("dssp up ended after %v: %s", took.Round(100*time.Millisecond), lastLine(string(out)))
}

// TestRefusedTrainerIsToldWhy: a trainer whose updates turn NaN (a broken
// device) is refused by the shards; after 20 refusals in a row its node
// stops its worker and tells it, and step() raises dsspmesh.Stopped naming
// the refusal; the other trainers train on.
func TestRefusedTrainerIsToldWhy(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	c := NewCluster(t, 3, []string{"--threads", "1", "--eval-every", "5s", "--log-level", "warn", "--trainer", "external"},
		[]string{"--model", "external", "--dataset", "suite"})
	tr := newPyTrainers(t, c)
	const script = "test/pytorch/models.py"
	c.Start(0)
	tr.Start(0, script, "train", "frozen")
	c.WaitFor("node0's trainer training", 90*time.Second, func() bool { return c.Iter(0) > 0 })
	c.Start(1)
	tr.Start(1, script, "train", "frozen")
	c.Start(2)
	tr.Start(2, script, "train", "frozen", "--poison-after", "10")
	c.WaitFor("the poisoned trainer stopped", 120*time.Second, func() bool { done, _ := tr.Exited(2); return done })
	_, err := tr.Exited(2)
	log := tr.logs[2]
	tail := LogTailN(log, 30)
	if err == nil || !strings.Contains(tail, "dsspmesh.errors.Stopped") || !strings.Contains(tail, "refused") {
		t.Fatalf("the poisoned trainer exited with %v; its log:\n%s", err, tail)
	}
	before := c.Iter(0)
	c.WaitFor("the others train on", 60*time.Second, func() bool { return c.Iter(0) >= before+20 })
	t.Logf("the poisoned trainer was told: %s", lastLine(tail))
}

// TestUnstableSettingIsFlagged: a learning rate far beyond what the model
// trains at is flagged within three evaluations: /status's learning
// warning, or the diverged stop when the loss is no longer finite.
func TestUnstableSettingIsFlagged(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	c := NewCluster(t, 3, []string{"--threads", "1", "--eval-every", "2s", "--eval-samples", "1000", "--log-level", "warn", "--trainer", "external"},
		[]string{"--model", "external", "--dataset", "suite"})
	tr := newPyTrainers(t, c)
	const script = "test/pytorch/models.py"
	for i := range 3 {
		c.Start(i)
		tr.Start(i, script, "train", "groups", "--lr", "5")
		if i == 0 {
			c.WaitFor("node0's trainer training", 90*time.Second, func() bool { return c.Iter(0) > 0 })
		}
	}
	var flag string
	evals := 0
	c.WaitFor("the learning check's flag", 120*time.Second, func() bool {
		for _, s := range c.Statuses() {
			if s == nil {
				continue
			}
			evals = max(evals, len(s.EvalHistory))
			if s.Learning != "" {
				flag = s.Learning
				return true
			}
			if s.Phase == "diverged" {
				flag = s.Stopped
				return true
			}
		}
		return false
	})
	if evals > 3 {
		t.Errorf("flagged after %d evaluations, want within 3", evals)
	}
	if !strings.Contains(flag, "dssp:3:12") && !strings.Contains(flag, "diverged") {
		t.Errorf("the flag names no staleness bound: %s", flag)
	}
	t.Logf("after %d evaluations: %s", evals, flag)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// LogTailN is the last n lines of the file at path, one per line.
func LogTailN(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestEvaluatorFollowsTheTrainers: the evaluator is a member whose pushes
// shard 0 applied (the evaluation lease), so the mesh reports accuracy as
// soon as a trainer trains; kill -9 of the evaluator's trainer, once
// every trainer trains, moves the lease to a member with a trainer, and
// the accuracy is reported again within an evaluation period.
func TestEvaluatorFollowsTheTrainers(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	const every = 2 * time.Second
	c := NewCluster(t, 3, []string{"--threads", "1", "--eval-every", every.String(), "--eval-samples", "500", "--log-level", "warn", "--trainer", "external"},
		[]string{"--model", "external", "--dataset", "suite"})
	tr := newPyTrainers(t, c)
	const script = "test/pytorch/models.py"
	for i := range 3 {
		c.Start(i)
		tr.Start(i, script, "train", "frozen")
		if i == 0 {
			c.WaitFor("node0's trainer training", 90*time.Second, func() bool { return c.Iter(0) > 0 })
		}
	}
	// Every trainer trains before the kill, and the lease has settled on
	// the lowest id (every worker has a push applied): a trainer still
	// importing torch has no worker to take the lease, and a kill of a
	// holder the lease has already left would time the others' start or
	// the next periodic evaluation, not the takeover.
	c.WaitFor("every node's trainer training", 90*time.Second, func() bool { return c.Iter(0) > 0 && c.Iter(1) > 0 && c.Iter(2) > 0 })
	ev, lowest := -1, ""
	for i, s := range c.Statuses() {
		if s != nil && (lowest == "" || s.Node < lowest) {
			ev, lowest = i, s.Node
		}
	}
	allTrain := time.Now()
	var first *records.EvalResult
	c.WaitFor("an evaluation by the lowest id, every trainer training", 60*time.Second, func() bool {
		first = Accuracy(c.Statuses())
		return first != nil && first.By == lowest && first.At.After(allTrain)
	})
	killed := time.Now()
	tr.Kill(ev)
	var next *records.EvalResult
	took := c.WaitFor("an evaluation by another node after the kill", 60*time.Second, func() bool {
		for i, s := range c.Statuses() {
			if i != ev && s != nil && s.Eval != nil && s.Eval.By != first.By && s.Eval.At.After(killed) {
				next = s.Eval
				return true
			}
		}
		return false
	})
	// The period is --eval-every or, where one evaluation takes longer
	// (a trainer evaluating on a thread beside its training, on a loaded
	// box), the evaluation's own time: the new evaluator's mean, from its
	// dssp_eval_duration_seconds.
	period := every
	for i, s := range c.Statuses() {
		if s != nil && s.Node == next.By {
			if mean, ok := meanEvalSeconds(get(c.Mesh.Procs[i].HTTP + "/metrics")); ok {
				period = max(period, mean)
			}
		}
	}
	t.Logf("evaluator %s's trainer killed; %s reported %.2f%% %v later (evaluations every %v; one takes %v there on average)",
		first.By, next.By, 100*next.Accuracy, took.Round(100*time.Millisecond), every, period.Round(100*time.Millisecond))
	if took > period+time.Second {
		t.Errorf("the accuracy came back %v after the kill, want within one evaluation period (%v) and a second", took, period)
	}
	for i, s := range c.Statuses() {
		if i != ev && s != nil && s.Evaluator == first.By {
			t.Errorf("node %d still names %s evaluator after its trainer died", i, first.By)
		}
	}
}

// meanEvalSeconds is the mean of dssp_eval_duration_seconds in a
// Prometheus text exposition, ok false without an evaluation.
func meanEvalSeconds(metrics string) (time.Duration, bool) {
	var sum, count float64
	for _, l := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(l, "dssp_eval_duration_seconds_sum "); ok {
			sum, _ = strconv.ParseFloat(v, 64)
		}
		if v, ok := strings.CutPrefix(l, "dssp_eval_duration_seconds_count "); ok {
			count, _ = strconv.ParseFloat(v, 64)
		}
	}
	if count == 0 {
		return 0, false
	}
	return time.Duration(sum / count * float64(time.Second)), true
}
