package status

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// exported is the names of the families m exports.
func exported(t *testing.T, m *Metrics) map[string]bool {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range fams {
		out[f.GetName()] = true
	}
	return out
}

// TestWorkerMetricsOnlyOnTrainingNodes: a node that does not train (no
// RegisterWorker, no Status.Worker) exports none of the worker loop's
// counters and histograms, where a training node exports them all; the
// iteration count is dssp_worker_iterations_total alone.
func TestWorkerMetricsOnlyOnTrainingNodes(t *testing.T) {
	loop := []string{"dssp_worker_iterations_total", "dssp_worker_samples_total", "dssp_worker_compute_seconds_total",
		"dssp_worker_wait_seconds_total", "dssp_worker_push_retries_total", "dssp_worker_gradients_refused_total",
		"dssp_worker_push_duration_seconds", "dssp_worker_gate_hold_seconds"}
	idle := func() Status { s := sampleStatus(); s.Worker = nil; return s }
	fams := exported(t, NewMetrics(idle))
	for name := range fams {
		if strings.HasPrefix(name, "dssp_worker_") && name != "dssp_worker_clock" && name != "dssp_worker_gap" &&
			name != "dssp_worker_grant" && name != "dssp_worker_waiting" || strings.HasPrefix(name, "dssp_local_worker_") {
			t.Errorf("a node that does not train exports %s", name)
		}
	}
	if !fams["dssp_shard_raft_apply_seconds"] {
		t.Error("a node that does not train lost its shard metrics")
	}

	m := NewMetrics(sampleStatus)
	m.RegisterWorker()
	fams = exported(t, m)
	for _, name := range loop {
		if !fams[name] {
			t.Errorf("a training node does not export %s", name)
		}
	}
	if fams["dssp_local_worker_iteration"] {
		t.Error("dssp_local_worker_iteration (a second iteration count) is exported")
	}
	if !fams["dssp_local_worker_batch"] || !fams["dssp_local_worker_local_steps"] {
		t.Error("a training node does not export dssp_local_worker_batch and dssp_local_worker_local_steps")
	}
}

// TestShardLeaderGaugeHasNoChangingLabel: dssp_shard_is_leader is one
// series per hosted shard, labelled by the shard alone, so a leader change
// flips its value instead of starting a new series.
func TestShardLeaderGaugeHasNoChangingLabel(t *testing.T) {
	s := sampleStatus()
	st := func() Status { return s }
	m := NewMetrics(st)
	series := func() map[string]float64 {
		out := map[string]float64{}
		fams, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != "dssp_shard_is_leader" {
				continue
			}
			for _, mt := range f.GetMetric() {
				var labels []string
				for _, l := range mt.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				out[strings.Join(labels, ",")] = mt.GetGauge().GetValue()
			}
		}
		return out
	}
	before := series()
	if len(before) != 2 || before["shard=0"] != 1 || before["shard=1"] != 0 {
		t.Fatalf("before the change: %v", before)
	}
	s.Shards[0].Leader, s.Shards[0].Local, s.Shards[0].Term = "node-b", "follower", 4
	s.Shards[1].Leader, s.Shards[1].Local, s.Shards[1].Term = "node-a", "leader", 3
	after := series()
	if len(after) != 2 || after["shard=0"] != 0 || after["shard=1"] != 1 {
		t.Fatalf("after the change: %v", after)
	}
	if exported(t, m)["dssp_shard_leader"] {
		t.Error("dssp_shard_leader, labelled by the leader's id, is still exported")
	}
}

// TestProcessNetworkCountersAreNamespaceWide shows why /metrics has no
// process_network_*_bytes_total: Prometheus's process collector reads them
// from /proc/<pid>/net/netstat (IpExt InOctets/OutOctets), the IP traffic
// of the whole network namespace since it was created — every process and
// the loopback interface counted — so its value lies between this
// namespace's counter read just before and just after the scrape, however
// little this process sent; and the same namespace-wide view is what
// /proc/net/dev sums over its interfaces. The node's registry drops them.
func TestProcessNetworkCountersAreNamespaceWide(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/<pid>/net is Linux's")
	}
	outOctets := func() float64 {
		b, err := os.ReadFile("/proc/self/net/netstat")
		if err != nil {
			t.Skip(err)
		}
		lines := strings.Split(string(b), "\n")
		for i := 0; i+1 < len(lines); i++ {
			names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
			if len(names) == 0 || names[0] != "IpExt:" || len(values) != len(names) {
				continue
			}
			for j, n := range names {
				if n == "OutOctets" {
					v, _ := strconv.ParseFloat(values[j], 64)
					return v
				}
			}
		}
		t.Skip("no IpExt OutOctets in /proc/self/net/netstat")
		return 0
	}
	devTransmit := func() (all, loopback float64) {
		b, err := os.ReadFile("/proc/net/dev")
		if err != nil {
			t.Skip(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			iface, counters, ok := strings.Cut(line, ":")
			f := strings.Fields(counters)
			if !ok || len(f) < 9 {
				continue
			}
			v, _ := strconv.ParseFloat(f[8], 64) // transmit bytes
			all += v
			if strings.TrimSpace(iface) == "lo" {
				loopback += v
			}
		}
		return all, loopback
	}

	raw := prometheus.NewRegistry()
	raw.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	lo := outOctets()
	fams, err := raw.Gather()
	hi := outOctets()
	if err != nil {
		t.Fatal(err)
	}
	var sent float64
	found := false
	for _, f := range fams {
		if f.GetName() == "process_network_transmit_bytes_total" {
			sent, found = f.GetMetric()[0].GetCounter().GetValue(), true
		}
	}
	if !found {
		t.Skip("this client_golang's process collector has no process_network_transmit_bytes_total")
	}
	if sent < lo || sent > hi {
		t.Fatalf("process_network_transmit_bytes_total %g, not the namespace's IpExt OutOctets (%g to %g)", sent, lo, hi)
	}
	all, loopback := devTransmit()
	t.Logf("process_network_transmit_bytes_total %.0f = the namespace's IpExt OutOctets; /proc/net/dev transmit bytes: %.0f over all interfaces, %.0f on lo", sent, all, loopback)

	for name := range exported(t, NewMetrics(sampleStatus)) {
		if strings.HasPrefix(name, "process_network_") {
			t.Errorf("the node exports %s, the whole network namespace's traffic", name)
		}
	}
	if !exported(t, NewMetrics(sampleStatus))["process_cpu_seconds_total"] {
		t.Error("the node lost the process collector's other metrics")
	}
}
