package status

import (
	"time"

	"dsspmesh/node/job"
	"dsspmesh/node/records"
)

// Status is a node's view of the mesh, served as JSON at /status, rendered
// by the dashboard and `dssp status`, polled by `dssp up`, and the source of
// most Prometheus metrics (so the two never disagree).
type Status struct {
	Node    string    `json:"node"`
	Gossip  string    `json:"gossip"`
	QUIC    string    `json:"quic"`
	HTTP    string    `json:"http,omitempty"` // where peers reach this node's HTTP ("" when it serves none)
	Started time.Time `json:"started"`
	Now     time.Time `json:"now"`
	// Phase is starting, joining, waiting-trainer (the bootstrap node of a
	// new --model external job, until its first trainer fixes the layout),
	// training (up, with a worker; under --trainer external a worker runs
	// while a trainer is attached: Trainer), hosting (up, hosting its
	// shards without a worker: --train=false), leaving or stopped; diverged while it hosts its shards after its worker stopped
	// on the job's divergence (Stopped says why).
	Phase string `json:"phase"`
	// Stopped says why this node stopped training (the job diverged, as
	// the node saw itself); empty while it trains.
	Stopped string `json:"stopped,omitempty"`
	// EvalClaimsDropped counts the evaluations received from peers that
	// were not acted on: from a member that is not the evaluator, with a
	// sequence out of the parameters' domain, or a divergence claim this
	// node's own check of the parameters did not confirm.
	EvalClaimsDropped uint64 `json:"eval_claims_dropped,omitempty"`
	// EvalAudit is this node's last re-evaluation of the evaluator's
	// claim (node/eval's audit.go), EvalAudits its audits by result
	// (agree, disagree, failed); a disagreement within eval.AlarmFor is
	// one of Warnings.
	EvalAudit  *records.AuditResult `json:"eval_audit,omitempty"`
	EvalAudits map[string]uint64    `json:"eval_audits,omitempty"`
	Spec       *job.Spec            `json:"spec,omitempty"`
	Policy     string               `json:"policy,omitempty"`
	Members    []MemberStatus       `json:"members"`
	// Shards lists every shard of the job. Those this node hosts are
	// described by its own replica; the others by the freshest answer of a
	// member that hosts one (From, AgeSeconds), so any node shows the whole
	// mesh.
	Shards []records.ShardStatus `json:"shards"`
	// Workers are the clocks of every worker in the clock table of the
	// lowest shard this node leads or, when it leads none, as the freshest
	// answer of a shard leader gave them (WorkersFrom, WorkersAgeSeconds).
	Workers           []records.WorkerStatus `json:"workers"`
	WorkersFrom       string                 `json:"workers_from,omitempty"`
	WorkersAgeSeconds float64                `json:"workers_age_seconds,omitempty"`
	// Trainers is every training member's worker loop: this node's, and
	// the others' as they last answered.
	Trainers []TrainerStatus `json:"trainers"`
	// Events are what happened to the mesh as this node saw it (joins,
	// failures, suspicions, leaves, leader changes, rejections), oldest
	// first; the last 256 are kept.
	Events []records.Event `json:"events"`
	// EvalHistory is the evaluations this node has seen, oldest first
	// (the last 360 are kept): the dashboard's accuracy and loss charts.
	EvalHistory []records.EvalResult `json:"eval_history"`
	// Trainer is this node's trainer socket under --trainer external; nil
	// otherwise.
	Trainer *ExternalTrainer `json:"trainer,omitempty"`
	// Worker is this node's own worker loop; nil when it does not train.
	Worker *records.LocalWorker `json:"worker,omitempty"`
	// Eval is the latest evaluation of the global parameters known to this
	// node (made here or received from the evaluating node).
	Eval *records.EvalResult `json:"eval,omitempty"`
	// Evaluator is the node that evaluates now: the live training member
	// with the lowest id.
	Evaluator string `json:"evaluator,omitempty"`
	// Checkpoint is the newest model file in this node's --checkpoint-dir
	// (written while it evaluates; see "Model snapshots" in node/eval's package doc).
	Checkpoint string          `json:"checkpoint,omitempty"`
	Transport  TransportStatus `json:"transport"`
	// Insecure is true when this node runs without a mesh key (--insecure):
	// no gossip encryption, no mutual TLS; anyone who reaches it can join,
	// vote and push.
	Insecure bool `json:"insecure"`
	// Revoked are the node ids revoked (dssp revoke) as this node knows
	// them: its connections, gossip and pushes are refused.
	Revoked []string `json:"revoked,omitempty"`
	// PinnedKeys counts the legacy node ids (of data dirs made before
	// self-certifying ids) whose key this node has pinned;
	// IdentityConflicts are those two shards pinned to different keys,
	// refused until revoked.
	PinnedKeys        int      `json:"pinned_keys,omitempty"`
	IdentityConflicts []string `json:"identity_conflicts,omitempty"`
	// RevokedSelf says that the operator revoked this node itself, and how
	// it learnt it (it stops); RevocationsRefused counts the revocations
	// refused as not authenticated by the mesh key (POST /revoke, relays).
	RevokedSelf        string `json:"revoked_self,omitempty"`
	RevocationsRefused uint64 `json:"revocations_refused,omitempty"`
	// Refusals are the gradients the shard leaders on this node refused
	// (NaN/Inf, norm outliers), per worker, summed over the shards it
	// leads; RepeatOffender marks a worker that keeps sending them.
	Refusals []records.RefusalStatus `json:"refusals,omitempty"`
	// Warnings are what an operator must act on ([Warnings]): a job that
	// survives no failure, a mesh smaller than the job's replication,
	// every shard that lost its quorum and the voters it waits for,
	// Learning, and an evaluation audit that disagreed.
	Warnings []string `json:"warnings,omitempty"`
	// Learning is the learning check's warning (node/eval.Learning): the
	// job's test loss stays at its start or climbs away from its best,
	// with the staleness bound and learning rate in force; "" while it
	// learns.
	Learning string `json:"learning,omitempty"`
}

// MemberStatus is one live member.
type MemberStatus struct {
	ID      string `json:"id"`
	Gossip  string `json:"gossip"`
	QUIC    string `json:"quic"`
	Trains  bool   `json:"trains"`
	Backend string `json:"backend"`
	// HTTP is the member's HTTP address from its own view answer (this
	// node's: Status.HTTP); "" until it answered, or when it serves none.
	HTTP string `json:"http,omitempty"`
	// RTTMs is this node's least measured round trip to the member, in
	// milliseconds (0 for itself; absent before a connection measured it).
	RTTMs *float64 `json:"rtt_ms,omitempty"`
	// Leads is how many shards the member leads, as this node sees them.
	Leads int `json:"leads"`
}

// ExternalTrainer is [records.ExternalTrainer].
type ExternalTrainer = records.ExternalTrainer

// TrainerStatus is one member's worker loop, from its own answer.
type TrainerStatus struct {
	ID string `json:"id"`
	// Iter is the iterations the loop computed since its process
	// started (records.LocalWorker.Iter), not its clock on the shards.
	Iter           uint64  `json:"iter"`
	ItersPerSec    float64 `json:"iters_per_sec"`
	Loss           float64 `json:"loss"`
	ComputeSeconds float64 `json:"compute_seconds"`
	WaitSeconds    float64 `json:"wait_seconds"`
	// WaitShare is wait / (compute + wait) since the worker started.
	WaitShare  float64 `json:"wait_share"`
	AgeSeconds float64 `json:"age_seconds,omitempty"`
	// Batch and PredictedSeconds are the worker's mini-batch and, under
	// --balance, its predicted compute time; LocalSteps its round's local
	// steps, 1 without local rounds (records.LocalWorker's).
	Batch            int64   `json:"batch"`
	PredictedSeconds float64 `json:"predicted_seconds,omitempty"`
	LocalSteps       int     `json:"local_steps"`
}

// TransportStatus counts mesh transport events.
type TransportStatus struct {
	FrameErrors    uint64 `json:"frame_errors"`
	PreambleErrors uint64 `json:"preamble_errors"`
	DialFailures   uint64 `json:"dial_failures"`
	Dials          uint64 `json:"dials"`
}

// Up reports whether the node is up: joined, the spec adopted and the
// replicas started (phase training, hosting for a node that does not
// train, or diverged: it still hosts its shards after its worker stopped
// on the job's divergence).
func (s Status) Up() bool {
	return s.Phase == "training" || s.Phase == "hosting" || s.Phase == "diverged"
}
