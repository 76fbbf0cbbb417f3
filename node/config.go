package node

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"dsspmesh/cudaops"
	"dsspmesh/node/job"
	"dsspmesh/node/memlimit"
)

// Config.Trainer's values.
const (
	TrainerBuiltin  = "builtin"
	TrainerExternal = "external"
)

// externalTrainer reports whether this node trains through an external
// trainer (--trainer external, and it trains).
func (c Config) externalTrainer() bool { return c.Train && c.Trainer == TrainerExternal }

// TrainerSocket is the trainer socket's name in the data directory.
const TrainerSocket = "trainer.sock"

// Config is everything one node process is started with. The job itself
// (model, paradigm, shards...) is [job.Spec]; Config holds it so flags can
// set it, but only a bootstrap node's spec is used as given: a joiner adopts
// the mesh's spec and refuses explicitly set fields that disagree.
type Config struct {
	DataDir string // node id, job spec, Raft state; created if missing

	// Host is the address this node binds and announces to peers. 0.0.0.0
	// cannot be announced, so on a multi-host mesh set the host's own IP.
	Host       string
	GossipPort int // memberlist, TCP and UDP; what --join names
	QUICPort   int // mesh transport (UDP): pushes and Raft
	HTTPAddr   string

	Join        []string      // gossip addresses of live nodes; empty = bootstrap
	JoinTimeout time.Duration // how long seeds are retried before giving up

	KeyFile  string // mesh key written by dssp keygen
	Insecure bool   // run without a key: no gossip encryption, no mTLS
	// InsecurePublic allows Insecure on a non-loopback --host.
	InsecurePublic bool

	Train bool // run a worker (every node hosts shards)
	// Trainer is who computes this node's gradients: TrainerBuiltin (the
	// job's Go model) or TrainerExternal (a trainer process attached to
	// <data-dir>/trainer.sock, node/trainer; the worker runs while one is
	// attached). Without Train it has no effect: a node that trains
	// nothing serves no trainer socket.
	Trainer      string
	Backend      string        // compute backend
	Threads      int           // goroutines per mini-batch; 0 = GOMAXPROCS
	DataPath     string        // dataset folder; "" finds MNIST in the module cache
	Slowdown     float64       // multiplies this worker's measured compute time
	ComputeDelay time.Duration // emulated accelerator time of the job's batch, stretched by Slowdown (node/worker/emulate.go)

	// MemoryLimit is the soft memory limit the node sets once it knows
	// its job (node/memlimit): memlimit.Auto (from the model's and the
	// dataset's bytes), memlimit.Off, or bytes.
	MemoryLimit int64

	EvalEvery   time.Duration // evaluation cadence of the designated node
	EvalSamples int           // test samples per evaluation; 0 = the whole test set
	// AuditFraction is how many re-evaluations of each evaluation claim
	// the mesh makes on average (node/eval's audit.go); 0: none.
	AuditFraction float64

	// CheckpointDir, if set, is where this node saves the snapshot it
	// evaluated, at most every CheckpointEvery, while it is the evaluator;
	// the newest CheckpointKeep files are kept.
	CheckpointDir   string
	CheckpointEvery time.Duration
	CheckpointKeep  int

	// Detection is memberlist's profile: "tuned" (the default: about 2 s,
	// mesh.TunedDetection, no false alarm in the fault suite), "lan"
	// (memberlist's, 5–6 s) or "fast" (sub-second failure detection on
	// loopback, false alarms under load).
	Detection    string
	LeaveTimeout time.Duration // how long a graceful leave may take
	// RaftTiming is "scaled" (raft's heartbeat and election timeouts
	// stretched on a node hosting many groups, shard.Config.ForGroups) or
	// "fixed" (shard.DefaultConfig's, whatever the group count).
	RaftTiming string
	LogLevel   string
	// Pprof serves net/http/pprof under /debug/pprof/ on the HTTP port, and
	// samples blocking and mutex contention for it (a debug aid: it costs a
	// little on every channel operation and lock).
	Pprof bool

	// AdvertiseGossip and AdvertiseQUIC, if set, are the host:port peers
	// are told to reach this node at instead of the bound ports: a NAT or a
	// proxy in front of it (the fault-injection tests route every peer
	// packet through one).
	AdvertiseGossip string
	AdvertiseQUIC   string
	// HistoryDir, if set, is a debug folder where the node appends its
	// pushes, applied entries and leadership changes for the fault
	// checkers of test/ (node/status/history.go).
	HistoryDir string
	// FaultNaNEvery > 0 (a hidden test flag) makes this worker's gradient
	// NaN on every FaultNaNEvery-th push: a flaky accelerator for the
	// fault suite's gradient-hygiene scenario.
	FaultNaNEvery int

	Spec job.Spec
}

// DefaultConfig returns the settings of a single-host node on loopback.
func DefaultConfig() Config {
	return Config{
		DataDir:         "dssp-data",
		Host:            "127.0.0.1",
		GossipPort:      7946,
		QUICPort:        7947,
		HTTPAddr:        "127.0.0.1:7948",
		JoinTimeout:     30 * time.Second,
		Train:           true,
		Trainer:         TrainerBuiltin,
		Backend:         "cpu",
		Slowdown:        1,
		EvalEvery:       5 * time.Second,
		AuditFraction:   DefaultAuditFraction,
		MemoryLimit:     memlimit.Auto,
		Detection:       "tuned",
		RaftTiming:      "scaled",
		CheckpointEvery: 5 * time.Minute,
		CheckpointKeep:  3,
		LeaveTimeout:    5 * time.Second,
		LogLevel:        "info",
		Spec:            job.DefaultSpec(),
	}
}

// Validate names the first bad value.
func (c Config) Validate() error {
	switch {
	case c.DataDir == "":
		return errors.New("--data-dir must not be empty")
	case net.ParseIP(c.Host) == nil:
		return fmt.Errorf("--host %q is not an IP address", c.Host)
	case net.ParseIP(c.Host).IsUnspecified():
		return fmt.Errorf("--host %s cannot be announced to peers; give this host's own IP", c.Host)
	case c.GossipPort < 0 || c.GossipPort > 65535:
		return fmt.Errorf("--gossip-port %d outside 0..65535", c.GossipPort)
	case c.QUICPort < 0 || c.QUICPort > 65535:
		return fmt.Errorf("--quic-port %d outside 0..65535", c.QUICPort)
	case c.KeyFile == "" && !c.Insecure:
		return errors.New("--key FILE is required (make one with: dssp keygen --out FILE), or --insecure to run without one")
	case c.KeyFile != "" && c.Insecure:
		return errors.New("--key and --insecure are mutually exclusive")
	case c.Insecure && !c.InsecurePublic && !isLoopback(c.Host):
		return fmt.Errorf("--insecure with --host %s: without a key anyone who reaches this address can join, vote and push; use a key (dssp keygen), a loopback --host, or --insecure-public to accept that", c.Host)
	case c.InsecurePublic && !c.Insecure:
		return errors.New("--insecure-public only makes sense with --insecure")
	case c.Trainer != TrainerBuiltin && c.Trainer != TrainerExternal:
		return fmt.Errorf("--trainer %q must be %s or %s", c.Trainer, TrainerBuiltin, TrainerExternal)
	case c.Threads < 0 || c.Threads > 4096:
		return fmt.Errorf("--threads %d: must be in [0, 4096]", c.Threads)
	case c.EvalSamples < 0:
		return fmt.Errorf("--eval-samples %d: must be >= 0", c.EvalSamples)
	case c.CheckpointDir != "" && c.CheckpointEvery <= 0:
		return fmt.Errorf("--checkpoint-every %v: must be > 0", c.CheckpointEvery)
	case c.CheckpointDir != "" && c.CheckpointKeep < 1:
		return fmt.Errorf("--checkpoint-keep %d: must be >= 1", c.CheckpointKeep)
	case c.Detection != "lan" && c.Detection != "tuned" && c.Detection != "fast":
		return fmt.Errorf("--detection %q must be lan, tuned or fast", c.Detection)
	case c.RaftTiming != "scaled" && c.RaftTiming != "fixed":
		return fmt.Errorf("--raft-timing %q must be scaled or fixed", c.RaftTiming)
	case !(c.AuditFraction >= 0 && c.AuditFraction <= 1):
		return fmt.Errorf("--audit-fraction %v: must be within [0, 1]", c.AuditFraction)
	case c.FaultNaNEvery < 0:
		return fmt.Errorf("--fault-nan-every %d: must be >= 0", c.FaultNaNEvery)
	}
	for _, err := range []error{
		CheckSlowdown(c.Slowdown),
		CheckDuration("compute-delay", c.ComputeDelay, 0, MaxComputeDelay),
		CheckDuration("join-timeout", c.JoinTimeout, time.Millisecond, MaxTimeout),
		CheckDuration("eval-every", c.EvalEvery, MinEvalEvery, MaxTimeout),
		CheckDuration("leave-timeout", c.LeaveTimeout, time.Millisecond, MaxTimeout),
	} {
		if err != nil {
			return err
		}
	}
	if _, err := ParseLogLevel(c.LogLevel); err != nil {
		return err
	}
	httpHost, _, err := net.SplitHostPort(c.HTTPAddr)
	if err != nil {
		return fmt.Errorf("--http-addr %q: %v", c.HTTPAddr, err)
	}
	if c.Pprof && !isLoopback(httpHost) {
		return fmt.Errorf("--pprof with --http-addr %s: pprof is unauthenticated and only served on a loopback address (127.0.0.1, ::1, localhost)", c.HTTPAddr)
	}
	for flag, a := range map[string]string{"--advertise-gossip": c.AdvertiseGossip, "--advertise-quic": c.AdvertiseQUIC} {
		if _, _, err := net.SplitHostPort(a); a != "" && err != nil {
			return fmt.Errorf("%s %q is not host:port: %v", flag, a, err)
		}
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			return fmt.Errorf("--join %q is not host:port: %v", j, err)
		}
	}
	if !contains(cudaops.BackendNames(), c.Backend) {
		return fmt.Errorf("--backend %q unknown (known: %s)", c.Backend, strings.Join(cudaops.BackendNames(), ", "))
	}
	return c.Spec.Validate()
}

// GossipAddr is the address peers pass to --join.
func (c Config) GossipAddr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.GossipPort)) }

// QUICAddr is the mesh transport's address.
func (c Config) QUICAddr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.QUICPort)) }

// BindFlags registers every field on fs, with c's current values as
// defaults. The job spec's flags are the ones listed in job.Spec.BindFlags (node/job/spec.go).
func (c *Config) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "folder for the node id, job spec and Raft state (created if missing; reuse it to recover after a crash)")
	fs.StringVar(&c.Host, "host", c.Host, "IP this node binds and announces to peers (on a multi-host mesh: this host's own address)")
	fs.IntVar(&c.GossipPort, "gossip-port", c.GossipPort, "memberlist port, TCP and UDP (what other nodes --join)")
	fs.IntVar(&c.QUICPort, "quic-port", c.QUICPort, "mesh transport port, UDP (pushes and Raft, mutual TLS)")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listen address for /metrics, /status and the dashboard at /")
	fs.StringSliceVar(&c.Join, "join", c.Join, "gossip address host:port of any live node (repeatable); a host name is resolved to every address it names and this node's own are skipped, so all nodes may share one name (a headless Service); omit, or name only this node, to bootstrap a new mesh")
	fs.DurationVar(&c.JoinTimeout, "join-timeout", c.JoinTimeout, "give up when no seed answers for this long")
	fs.StringVar(&c.KeyFile, "key", c.KeyFile, "mesh key file made by 'dssp keygen' (the same file on every node)")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "run without a mesh key: anyone who reaches the node can join, vote and push (loopback --host only, unless --insecure-public)")
	fs.BoolVar(&c.InsecurePublic, "insecure-public", c.InsecurePublic, "allow --insecure on a non-loopback --host (anyone on the network can join, vote and push)")
	fs.BoolVar(&c.Train, "train", c.Train, "run a worker on this node (every node hosts shards either way)")
	fs.StringVar(&c.Trainer, "trainer", c.Trainer, "who computes this node's gradients: builtin (the job's Go model) or external (a trainer process, e.g. PyTorch, attached to <data-dir>/trainer.sock; the worker runs while one is attached)")
	fs.StringVar(&c.Backend, "backend", c.Backend, "compute backend: "+strings.Join(cudaops.BackendNames(), ", "))
	fs.IntVar(&c.Threads, "threads", c.Threads, "goroutines computing each mini-batch (0 = all CPUs)")
	fs.StringVar(&c.DataPath, "data", c.DataPath, "dataset folder (default: MNIST from the GoMNIST module in the Go module cache)")
	fs.Float64Var(&c.Slowdown, "slowdown", c.Slowdown, "stretch this worker's measured compute time by this factor, to emulate a slower GPU (1 to 1000)")
	fs.DurationVar(&c.ComputeDelay, "compute-delay", c.ComputeDelay, "emulated accelerator time of a speed-1 worker for the job's batch, added to the measured compute before --slowdown stretches both; under --balance it grows with the worker's batch (0 to 1h)")
	fs.Float64Var(&c.AuditFraction, "audit-fraction", c.AuditFraction, "re-evaluations of each evaluation claim by another training member, drawn at random, on average; a disagreement beyond sampling noise is an alarm (0 to 1; 0: none)")
	fs.DurationVar(&c.EvalEvery, "eval-every", c.EvalEvery, "evaluate the global parameters this often (done by the live node with the lowest id; 100ms to 24h)")
	fs.Var(memlimit.Flag{V: &c.MemoryLimit}, "memory-limit", "soft memory limit of the node's Go heap: auto (64 MiB + the dataset + 4.5 × the model's bytes, unless GOMEMLIMIT is set), off, or MiB")
	fs.IntVar(&c.EvalSamples, "eval-samples", c.EvalSamples, "test samples per evaluation (0 = the whole test set)")
	fs.StringVar(&c.CheckpointDir, "checkpoint-dir", c.CheckpointDir, "save the evaluated model as safetensors in this folder while this node is the evaluator (set it on every training node)")
	fs.DurationVar(&c.CheckpointEvery, "checkpoint-every", c.CheckpointEvery, "at most one checkpoint per this long (the first evaluation after it has passed)")
	fs.IntVar(&c.CheckpointKeep, "checkpoint-keep", c.CheckpointKeep, "checkpoints kept in --checkpoint-dir (older ones are deleted)")
	fs.StringVar(&c.Detection, "detection", c.Detection, "failure detection profile: tuned (about 2 s, the default), lan (memberlist's, 5-6 s) or fast (loopback tests, sub-second, false alarms under load)")
	fs.StringVar(&c.RaftTiming, "raft-timing", c.RaftTiming, "raft timing: scaled (heartbeat, election and commit timeouts stretched up to 4x on a node hosting more than 16 raft groups: fewer idle RPCs, slower leader failover there) or fixed (shard.DefaultConfig's whatever the group count)")
	fs.DurationVar(&c.LeaveTimeout, "leave-timeout", c.LeaveTimeout, "how long a graceful leave on SIGTERM/SIGINT may take")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.AdvertiseGossip, "advertise-gossip", c.AdvertiseGossip, "host:port peers use to reach this node's gossip (default: --host and --gossip-port), e.g. behind NAT")
	fs.StringVar(&c.AdvertiseQUIC, "advertise-quic", c.AdvertiseQUIC, "host:port peers use to reach this node's mesh transport (default: --host and --quic-port)")
	fs.StringVar(&c.HistoryDir, "history-dir", c.HistoryDir, "debug: append every push, applied entry and leadership change to files in this folder (for the fault-injection checkers)")
	fs.BoolVar(&c.Pprof, "pprof", c.Pprof, "debug: serve /debug/pprof/ (CPU, heap, block and mutex profiles) on the HTTP port (loopback --http-addr only)")
	fs.IntVar(&c.FaultNaNEvery, "fault-nan-every", 0, "test only: make every Nth gradient of this worker NaN")
	_ = fs.MarkHidden("fault-nan-every")
	c.Spec.BindFlags(fs)
}

// HTTPExposureWarning is the warning a node logs at start when its HTTP
// listener (at addr, host:port) is reachable from the network: the
// dashboard, /status, /metrics and the model itself are served there to
// anyone, with no authentication. "" for a loopback address.
func HTTPExposureWarning(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if isLoopback(host) {
		return ""
	}
	return fmt.Sprintf("the HTTP port %s (dashboard, /status, /metrics, the model at /model.safetensors) is reachable from the network and has no authentication; give --http-addr a loopback address (127.0.0.1:port) unless the network is trusted", addr)
}

// isLoopback reports whether host (an IP or "localhost") is a loopback
// address.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
