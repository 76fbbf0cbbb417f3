package status

import (
	"bytes"
	"dsspmesh/node/records"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func sampleStatus() Status {
	return Status{
		Node: "node-a", Phase: "training", Policy: "dssp:3:12",
		Members: []MemberStatus{{ID: "node-a"}, {ID: "node-b"}},
		Shards: []records.ShardStatus{{ID: 0, Leader: "node-a", Term: 3, Local: "leader", Pushes: 42},
			{ID: 1, Leader: "node-b", Term: 2, Local: "follower", Pushes: 40}},
		Workers:   []records.WorkerStatus{{ID: "node-a", Clock: 12, Gap: 2, Grant: 1}, {ID: "node-b", Clock: 10, Waiting: true}},
		Worker:    &records.LocalWorker{Iter: 12, Slowdown: 1},
		Eval:      &records.EvalResult{Accuracy: 0.91, Loss: 0.3, Samples: 10000, At: time.Unix(100, 0), By: "node-a"},
		Transport: TransportStatus{FrameErrors: 1, DialFailures: 2},
	}
}

func TestHTTPServesStatusMetricsAndDashboard(t *testing.T) {
	status := sampleStatus
	m := NewMetrics(status)
	m.RegisterWorker()
	m.Iterations.Add(12)
	srv := httptest.NewServer(NewHTTPHandler(status, m))
	defer srv.Close()

	res, err := http.Get(srv.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var got Status
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got.Node != "node-a" || len(got.Workers) != 2 || got.Eval.Accuracy != 0.91 || got.Shards[1].Leader != "node-b" {
		t.Fatalf("/status: %+v", got)
	}

	res, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		f, ok := fams[name]
		if !ok {
			t.Fatalf("metric %s missing", name)
		}
	next:
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue next
				}
			}
			if m.Gauge != nil {
				return m.Gauge.GetValue()
			}
			return m.Counter.GetValue()
		}
		t.Fatalf("metric %s%v missing", name, labels)
		return 0
	}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"dssp_members", nil, 2},
		{"dssp_worker_clock", map[string]string{"worker": "node-b"}, 10},
		{"dssp_worker_gap", map[string]string{"worker": "node-a"}, 2},
		{"dssp_worker_grant", map[string]string{"worker": "node-a"}, 1},
		{"dssp_worker_waiting", map[string]string{"worker": "node-b"}, 1},
		{"dssp_shard_is_leader", map[string]string{"shard": "0"}, 1},
		{"dssp_shard_is_leader", map[string]string{"shard": "1"}, 0},
		{"dssp_shard_term", map[string]string{"shard": "0"}, 3},
		{"dssp_shard_pushes_applied_total", map[string]string{"shard": "1"}, 40},
		{"dssp_transport_errors_total", map[string]string{"kind": "dial"}, 2},
		{"dssp_eval_accuracy_ratio", nil, 0.91},
		{"dssp_worker_iterations_total", nil, 12},
	}
	for _, c := range checks {
		if v := value(c.name, c.labels); v != c.want {
			t.Errorf("%s%v = %g, want %g", c.name, c.labels, v, c.want)
		}
	}

	res, err = http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), `fetch("/status"`) || res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("dashboard: %s", res.Header.Get("Content-Type"))
	}
	if res, _ := http.Get(srv.URL + "/status?ready"); res.StatusCode != http.StatusOK {
		t.Fatalf("/status?ready of a training node: %d", res.StatusCode)
	}
	joining := httptest.NewServer(NewHTTPHandler(func() Status { s := sampleStatus(); s.Phase = "joining"; return s }, m))
	defer joining.Close()
	if res, _ := http.Get(joining.URL + "/status?ready"); res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/status?ready of a joining node: %d, want 503", res.StatusCode)
	}
	if res, _ := http.Get(joining.URL + "/status"); res.StatusCode != http.StatusOK {
		t.Fatalf("/status of a joining node: %d", res.StatusCode)
	}
	if res, _ := http.Get(srv.URL + "/nothing"); res.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown path: %d", res.StatusCode)
	}
}

// TestMetricsPassPromtool feeds /metrics to `promtool check metrics`
// (Debian's prometheus package), which enforces Prometheus's naming
// conventions. CI installs it, so there the test never skips.
func TestMetricsPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not installed; CI must install it (apt-get install -y prometheus)")
		}
		t.Skip("promtool not installed (apt-get install -y prometheus); metric names not checked")
	}
	m := NewMetrics(sampleStatus)
	m.RegisterWorker()
	m.Iterations.Add(3)
	m.PushSeconds.Observe(0.02)
	m.GateHoldSeconds.Observe(0.01)
	m.RaftApplySeconds.Observe(0.003)
	m.EvalSeconds.Observe(1.5)
	srv := httptest.NewServer(NewHTTPHandler(sampleStatus, m))
	defer srv.Close()
	res, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
	for _, h := range []string{"dssp_worker_push_duration_seconds", "dssp_worker_gate_hold_seconds", "dssp_shard_raft_apply_seconds", "dssp_eval_duration_seconds"} {
		if !strings.Contains(string(body), "# TYPE "+h+" histogram") {
			t.Errorf("%s is not a histogram", h)
		}
	}
}

// TestStatusWithNonFiniteValuesIsValidJSON: a diverging job's NaN and ±Inf
// are null in /status, which stays a 200 with a valid body.
func TestStatusWithNonFiniteValuesIsValidJSON(t *testing.T) {
	status := func() Status {
		s := sampleStatus()
		s.Worker.Loss = math.NaN()
		s.Worker.ItersPerSec = math.Inf(1)
		s.Eval.Loss = math.Inf(-1)
		s.Eval.Diverged = true
		s.Trainers = []TrainerStatus{{ID: "node-b", Loss: math.NaN()}}
		return s
	}
	srv := httptest.NewServer(NewHTTPHandler(status, NewMetrics(status)))
	defer srv.Close()
	res, err := http.Get(srv.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !json.Valid(body) {
		t.Fatalf("status %d, valid JSON %v: %s", res.StatusCode, json.Valid(body), body)
	}
	var raw map[string]any
	json.Unmarshal(body, &raw)
	w, e := raw["worker"].(map[string]any), raw["eval"].(map[string]any)
	if w["loss"] != nil || w["iters_per_sec"] != nil || e["loss"] != nil || e["diverged"] != true || w["iter"] != 12.0 || e["accuracy"] != 0.91 {
		t.Fatalf("worker %v, eval %v", w, e)
	}
	var got Status
	if err := json.Unmarshal(body, &got); err != nil || got.Node != "node-a" || got.Worker.Iter != 12 {
		t.Fatalf("decode: %v %+v", err, got)
	}
	t.Logf("worker: %v", w)
	res, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d", res.StatusCode)
	}
}

func TestMarshalFiniteMatchesEncodingJSON(t *testing.T) {
	s := sampleStatus()
	want, _ := json.Marshal(s)
	s.Worker.Loss = math.NaN()
	got, err := MarshalFinite(s)
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	json.Unmarshal(want, &a)
	json.Unmarshal(got, &b)
	a["worker"].(map[string]any)["loss"] = nil
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("fallback encoding differs:\n%s\n%s", want, got)
	}
	if _, err := MarshalFinite(make(chan int)); err == nil {
		t.Fatal("a channel encoded")
	}
}
