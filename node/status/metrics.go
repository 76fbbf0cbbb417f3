package status

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics is a node's Prometheus registry, named by Prometheus's
// conventions (counters end in _total, units in the name, base units:
// seconds, ratios in [0,1]). Counters and histograms of the worker loop and
// the shard leaders are updated where things happen; everything that
// describes state (clocks, gaps, grants, leaders, terms, membership,
// transport errors, accuracy) is read from [Status] at scrape time, so
// /metrics and /status never disagree.
type Metrics struct {
	Registry *prometheus.Registry

	Iterations prometheus.Counter
	Samples    prometheus.Counter
	ComputeSec prometheus.Counter
	WaitSec    prometheus.Counter
	Retries    prometheus.Counter
	Evals      prometheus.Counter

	PushSeconds      prometheus.Histogram // one push, send to release, gate hold included
	GateHoldSeconds  prometheus.Histogram // pushes the gate held: first Held frame to release
	RaftApplySeconds prometheus.Histogram // on this node's leaders: raft.Apply of a push batch to its application
	EvalSeconds      prometheus.Histogram // one evaluation of the global parameters
	Refused          prometheus.Counter
	ReplicasDiverged prometheus.Counter // this node's replicas that diverged (the agreement check)
}

// latencyBuckets span 0.5 ms to 16 s, doubling.
var latencyBuckets = prometheus.ExponentialBuckets(0.0005, 2, 16)

// NewMetrics builds the registry; status is called on every scrape and must
// be safe for concurrent use. The worker loop's counters and histograms
// (dssp_worker_*_total, dssp_worker_*_seconds) exist from the start but are
// exported only after [Metrics.RegisterWorker], which a node that trains
// calls: a --train=false node exports none of them, not zeros.
func NewMetrics(status func() Status) *Metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "dssp", Name: name, Help: help})
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "dssp", Name: name, Help: help, Buckets: buckets})
	}
	m := &Metrics{
		Registry:   prometheus.NewRegistry(),
		Iterations: counter("worker_iterations_total", "Iterations this node's worker completed (every shard released the push)."),
		Samples:    counter("worker_samples_total", "Training samples behind this worker's completed iterations."),
		ComputeSec: counter("worker_compute_seconds_total", "Seconds this worker spent computing gradients, slowdown included."),
		WaitSec:    counter("worker_wait_seconds_total", "Seconds this worker spent between sending a push and the last shard's release."),
		Retries:    counter("worker_push_retries_total", "Push attempts beyond the first: NotLeader redirects and resends after a transport error or timeout."),
		Evals:      counter("evaluations_total", "Evaluations of the global parameters made by this node."),

		PushSeconds: histogram("worker_push_duration_seconds",
			"Round trip of one push of this node's worker to a shard's leader, from the first send to the release (resends and gate hold included).", latencyBuckets),
		GateHoldSeconds: histogram("worker_gate_hold_seconds",
			"Time the gate held a push of this node's worker, from the leader's first Held frame to the release; only held pushes are observed.", latencyBuckets),
		RaftApplySeconds: histogram("shard_raft_apply_seconds",
			"On the shards this node leads: time from proposing a batch of pushes to Raft to its application (quorum commit and FSM).", latencyBuckets),
		Refused:          counter("worker_gradients_refused_total", "Gradients of this worker a shard refused (NaN/Inf, norm outlier, non-finite step); each was recomputed."),
		ReplicasDiverged: counter("replicas_diverged_total", "This node's shard replicas that diverged (the agreement check: a state digest unlike the majority's, or a damaged log entry) and stopped to be rebuilt from their peers."),
		EvalSeconds: histogram("eval_duration_seconds",
			"Time one evaluation of the global parameters on the test set took on this node.", prometheus.ExponentialBuckets(0.01, 2, 12)),
	}
	m.Registry.MustRegister(m.Evals, m.RaftApplySeconds, m.EvalSeconds, m.ReplicasDiverged,
		collectors.NewGoCollector(), processCollector{collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})},
		&statusCollector{status: status}, libCollector{})
	// dssp_shard_quorum_lost (quorumCollector, below).
	m.Registry.MustRegister(quorumCollector{status: status})
	return m
}

// RegisterWorker exports the worker loop's counters and histograms; a
// node calls it once, when it trains.
func (m *Metrics) RegisterWorker() {
	m.Registry.MustRegister(m.Iterations, m.Samples, m.ComputeSec, m.WaitSec, m.Retries, m.Refused,
		m.PushSeconds, m.GateHoldSeconds)
}

// processCollector is Prometheus's process collector without its
// process_network_{receive,transmit}_bytes_total: on Linux those read
// IpExt InOctets/OutOctets of /proc/<pid>/net/netstat, the IP traffic of
// the whole network namespace since it was created (every process,
// loopback included), not this process's — 43 GB on a node up 25 s
// (TestProcessNetworkCountersAreNamespaceWide). The mesh's own traffic is
// dssp_gossip_sent_bytes_total and the transport counters.
type processCollector struct{ prometheus.Collector }

// notPerProcess is the start of the dropped metrics' names.
const notPerProcess = `fqName: "process_network_`

func (c processCollector) Describe(ch chan<- *prometheus.Desc) {
	all := make(chan *prometheus.Desc)
	go func() { c.Collector.Describe(all); close(all) }()
	for d := range all {
		if !strings.Contains(d.String(), notPerProcess) {
			ch <- d
		}
	}
}

func (c processCollector) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() { c.Collector.Collect(all); close(all) }()
	for m := range all {
		if !strings.Contains(m.Desc().String(), notPerProcess) {
			ch <- m
		}
	}
}

var (
	descMembers   = prometheus.NewDesc("dssp_members", "Live members in this node's membership view.", nil, nil)
	descClock     = prometheus.NewDesc("dssp_worker_clock", "Worker clock (pushes applied) in the clock table of the lowest shard this node leads.", []string{"worker"}, nil)
	descGap       = prometheus.NewDesc("dssp_worker_gap", "Worker clock minus the slowest live worker's.", []string{"worker"}, nil)
	descGrant     = prometheus.NewDesc("dssp_worker_grant", "DSSP extra iterations still granted to the worker.", []string{"worker"}, nil)
	descWaiting   = prometheus.NewDesc("dssp_worker_waiting", "1 while the worker's push is held by the gate.", []string{"worker"}, nil)
	descLeader    = prometheus.NewDesc("dssp_shard_is_leader", "1 if this node leads the shard, 0 if it only hosts a replica; which node leads is in /status.", []string{"shard"}, nil)
	descTerm      = prometheus.NewDesc("dssp_shard_term", "Raft term of the shard's replica on this node.", []string{"shard"}, nil)
	descApplied   = prometheus.NewDesc("dssp_shard_pushes_applied_total", "Pushes applied by the shard's replica on this node (restarts with the replica).", []string{"shard"}, nil)
	descTransport = prometheus.NewDesc("dssp_transport_errors_total", "Mesh transport errors since start, by kind.", []string{"kind"}, nil)
	descDials     = prometheus.NewDesc("dssp_transport_dials_total", "Mesh transport connections this node dialled since start.", nil, nil)
	descAccuracy  = prometheus.NewDesc("dssp_eval_accuracy_ratio", "Test accuracy (0 to 1) of the latest evaluation of the global parameters.", []string{"by"}, nil)
	descLoss      = prometheus.NewDesc("dssp_eval_loss", "Test loss of the latest evaluation of the global parameters.", []string{"by"}, nil)
	descInsecure  = prometheus.NewDesc("dssp_insecure", "1 when this node runs without a mesh key (--insecure): no encryption, no authentication.", nil, nil)
	descAudits    = prometheus.NewDesc("dssp_eval_audits_total", "Re-evaluations by this node of the evaluator's claims, by result: agree, disagree (beyond sampling noise: the alarm), failed.", []string{"result"}, nil)
	descRefused   = prometheus.NewDesc("dssp_shard_gradients_refused_total", "Gradients the shard leaders on this node refused, per worker and reason (non-finite, outlier).", []string{"worker", "reason"}, nil)
	descOffender  = prometheus.NewDesc("dssp_worker_repeat_offender", "1 while the worker keeps sending gradients the shard leaders here refuse.", []string{"worker"}, nil)
	descBatch     = prometheus.NewDesc("dssp_local_worker_batch", "Mini-batch size of this node's worker: the job's, or under --balance the one shard 0 assigned.", nil, nil)
	descSteps     = prometheus.NewDesc("dssp_local_worker_local_steps", "Local steps of this node's worker's current round: the job's --local-steps, or under --balance its round's samples over the job's batch; 1 without local rounds.", nil, nil)
	descPredicted = prometheus.NewDesc("dssp_local_worker_predicted_compute_seconds", "Under --balance: the balancer's predicted compute time of this worker's batch (its predicted finish after the iteration starts).", nil, nil)
)

type statusCollector struct{ status func() Status }

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMembers, descClock, descGap, descGrant, descWaiting, descLeader,
		descTerm, descApplied, descTransport, descDials, descAccuracy, descLoss, descInsecure, descRefused, descOffender,
		descBatch, descSteps, descPredicted, descAudits} {
		ch <- d
	}
}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descMembers, float64(len(s.Members)))
	// Only a clock table this node holds: one a peer described is that
	// peer's to export.
	for _, w := range s.Workers {
		if s.WorkersFrom != "" {
			break
		}
		gauge(descClock, float64(w.Clock), w.ID)
		gauge(descGap, float64(w.Gap), w.ID)
		gauge(descGrant, float64(w.Grant), w.ID)
		gauge(descWaiting, b2f(w.Waiting), w.ID)
	}
	for _, sh := range s.Shards {
		if sh.Local == "" {
			continue
		}
		id := itoa(sh.ID)
		gauge(descLeader, b2f(sh.Local == "leader"), id)
		gauge(descTerm, float64(sh.Term), id)
		ch <- prometheus.MustNewConstMetric(descApplied, prometheus.CounterValue, float64(sh.Pushes), id)
	}
	ch <- prometheus.MustNewConstMetric(descTransport, prometheus.CounterValue, float64(s.Transport.FrameErrors), "frame")
	ch <- prometheus.MustNewConstMetric(descTransport, prometheus.CounterValue, float64(s.Transport.PreambleErrors), "preamble")
	ch <- prometheus.MustNewConstMetric(descTransport, prometheus.CounterValue, float64(s.Transport.DialFailures), "dial")
	ch <- prometheus.MustNewConstMetric(descDials, prometheus.CounterValue, float64(s.Transport.Dials))
	if s.Eval != nil {
		gauge(descAccuracy, s.Eval.Accuracy, s.Eval.By)
		gauge(descLoss, s.Eval.Loss, s.Eval.By)
	}
	if s.Worker != nil {
		gauge(descBatch, float64(s.Worker.Batch))
		gauge(descSteps, float64(s.Worker.LocalSteps))
		if s.Worker.PredictedSeconds > 0 {
			gauge(descPredicted, s.Worker.PredictedSeconds)
		}
	}
	gauge(descInsecure, b2f(s.Insecure))
	for _, result := range []string{"agree", "disagree", "failed"} {
		ch <- prometheus.MustNewConstMetric(descAudits, prometheus.CounterValue, float64(s.EvalAudits[result]), result)
	}
	for _, r := range s.Refusals {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(r.NonFinite), r.Worker, "non-finite")
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(r.Outliers), r.Worker, "outlier")
		gauge(descOffender, b2f(r.RepeatOffender), r.Worker)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// descQuorumLost is one gauge per shard this node knows the quorum of.
var descQuorumLost = prometheus.NewDesc("dssp_shard_quorum_lost",
	"1 while the shard has lost its quorum as this node sees it (no leader and fewer than a majority of its voters reachable), else 0; only shards whose quorum this node knows.",
	[]string{"shard"}, nil)

type quorumCollector struct{ status func() Status }

func (c quorumCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descQuorumLost }

func (c quorumCollector) Collect(ch chan<- prometheus.Metric) {
	for _, sh := range c.status().Shards {
		if sh.Quorum != "" {
			lost := sh.Quorum == "lost" // records.QuorumLost
			ch <- prometheus.MustNewConstMetric(descQuorumLost, prometheus.GaugeValue, b2f(lost), itoa(sh.ID))
		}
	}
}
