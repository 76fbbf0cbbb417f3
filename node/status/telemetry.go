package status

import (
	"sync"
	"sync/atomic"

	metrics "github.com/armon/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// Library counters: memberlist and hashicorp/raft report through
// armon/go-metrics' process-wide sink, which is a black hole unless one is
// installed. [CountLibraryTelemetry] installs one that keeps only what the
// mesh's scale costs need — gossip bytes sent and Raft heartbeats answered —
// in atomics, exported on /metrics as dssp_gossip_sent_bytes_total and
// dssp_raft_heartbeats_total. It is process-wide, so only a process that
// runs one node (dssp node) installs it; elsewhere the counters stay 0.
var libCounters struct {
	gossipUDP, gossipTCP atomic.Uint64 // bytes memberlist sent
	heartbeats           atomic.Uint64 // heartbeats this node's shard leaders had answered
	installed            atomic.Bool
}

var installTelemetry sync.Once

// CountLibraryTelemetry installs the counting sink as armon/go-metrics'
// global (once per process).
func CountLibraryTelemetry() {
	installTelemetry.Do(func() {
		conf := &metrics.Config{FilterDefault: true}
		if _, err := metrics.NewGlobal(conf, &countingSink{}); err == nil {
			libCounters.installed.Store(true)
		}
	})
}

// countingSink counts the keys it knows and drops everything else; every
// method is a few comparisons, cheap enough for raft's per-RPC samples.
type countingSink struct{ metrics.BlackholeSink }

func (*countingSink) IncrCounterWithLabels(key []string, val float32, _ []metrics.Label) {
	if len(key) == 3 && key[0] == "memberlist" && key[2] == "sent" {
		switch key[1] {
		case "udp":
			libCounters.gossipUDP.Add(uint64(val))
		case "tcp":
			libCounters.gossipTCP.Add(uint64(val))
		}
	}
}

func (s *countingSink) IncrCounter(key []string, val float32) { s.IncrCounterWithLabels(key, val, nil) }

// AddSampleWithLabels counts raft's labelled "raft.replication.heartbeat"
// sample, taken once per heartbeat a follower answered (the unlabelled
// duplicate carries the peer in its key and is ignored).
func (*countingSink) AddSampleWithLabels(key []string, _ float32, labels []metrics.Label) {
	if len(key) == 3 && key[0] == "raft" && key[1] == "replication" && key[2] == "heartbeat" && len(labels) > 0 {
		libCounters.heartbeats.Add(1)
	}
}

func (s *countingSink) AddSample(key []string, val float32) { s.AddSampleWithLabels(key, val, nil) }

var (
	descGossipSent = prometheus.NewDesc("dssp_gossip_sent_bytes_total",
		"Bytes memberlist sent (probes, gossip, push-pull), by protocol; counted only where the process installed the counting sink (dssp node does).", []string{"proto"}, nil)
	descHeartbeats = prometheus.NewDesc("dssp_raft_heartbeats_total",
		"Raft heartbeats the shard leaders on this node sent and had answered, over all groups and followers; counted only where the process installed the counting sink (dssp node does).", nil, nil)
)

type libCollector struct{}

func (libCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descGossipSent; ch <- descHeartbeats }

func (libCollector) Collect(ch chan<- prometheus.Metric) {
	if !libCounters.installed.Load() {
		return
	}
	ch <- prometheus.MustNewConstMetric(descGossipSent, prometheus.CounterValue, float64(libCounters.gossipUDP.Load()), "udp")
	ch <- prometheus.MustNewConstMetric(descGossipSent, prometheus.CounterValue, float64(libCounters.gossipTCP.Load()), "tcp")
	ch <- prometheus.MustNewConstMetric(descHeartbeats, prometheus.CounterValue, float64(libCounters.heartbeats.Load()))
}
