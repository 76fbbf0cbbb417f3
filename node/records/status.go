package records

import "time"

// RefusalStatus counts one worker's refused gradients.
type RefusalStatus struct {
	Worker    string `json:"worker"`
	NonFinite uint64 `json:"non_finite"`
	Outliers  uint64 `json:"outliers"`
	// Streak is the longest run of refusals without an accepted push on
	// any one shard led here; RepeatOffender is Streak ≥ shardapi.RepeatOffender.
	Streak         uint64 `json:"streak"`
	RepeatOffender bool   `json:"repeat_offender"`
}

// ShardStatus is one shard as this node sees it.
type ShardStatus struct {
	ID     uint32 `json:"id"`
	Leader string `json:"leader"`
	Term   uint64 `json:"term"`
	// Placement is the replica set placement assigns from this node's
	// membership view; Voters the Raft configuration (known where this
	// node hosts a replica).
	Placement []string `json:"placement"`
	Voters    []string `json:"voters,omitempty"`
	// Local is leader, follower, candidate or "" (no replica here).
	Local   string `json:"local,omitempty"`
	Applied uint64 `json:"applied,omitempty"`
	Pushes  uint64 `json:"pushes,omitempty"` // pushes applied by the replica described
	// From names the member whose replica described a shard not hosted
	// here, AgeSeconds how old its answer is; both empty for a local replica.
	From       string  `json:"from,omitempty"`
	AgeSeconds float64 `json:"age_seconds,omitempty"`
	// Quorum is ok (a leader is known), electing (no leader yet, or a
	// majority of Voters still reachable) or lost (no leader for
	// node/status.QuorumGrace and fewer than a majority of Voters
	// reachable: the shard is frozen until WaitingFor come back), as the
	// node hosting the replica described judged it; "" where unknown.
	// LeaderlessSeconds is how long that node has seen no leader.
	Quorum            string   `json:"quorum,omitempty"`
	WaitingFor        []string `json:"waiting_for,omitempty"`
	LeaderlessSeconds float64  `json:"leaderless_seconds,omitempty"`
	// Refused is why this node's replica of the shard, placed here, could
	// not start (a damaged store: the file, the problem and the remedy);
	// "" when it runs or is not placed here.
	Refused string `json:"refused,omitempty"`
	// Evaluator is the worker the evaluation lease names, as the replica
	// described sees its gate (authoritative on shard 0).
	Evaluator string `json:"evaluator,omitempty"`
	// Diverged says that this node's replica of the shard diverged (the
	// agreement check, docs/design.md "Replicas agree"): the index, why,
	// and where its rebuild stands; "" while it agrees.
	Diverged string `json:"diverged,omitempty"`
}

// Quorum states of a ShardStatus.
const (
	QuorumOK       = "ok"
	QuorumElecting = "electing"
	QuorumLost     = "lost"
)

// WorkerStatus is one worker's place in a shard's clock table.
type WorkerStatus struct {
	ID      string `json:"id"`
	Clock   int64  `json:"clock"`
	Gap     int64  `json:"gap"`   // clock minus the slowest live worker's
	Grant   int64  `json:"grant"` // DSSP extra iterations still granted
	Waiting bool   `json:"waiting"`
}

// LocalWorker is this node's worker loop.
type LocalWorker struct {
	// Iter counts the iterations this worker loop computed and pushed
	// (a refused gradient not counted) since its process started; not its clock on the
	// shards (WorkerStatus.Clock), which a worker joining late or
	// rejoining starts at a clock the shards give it.
	Iter    uint64  `json:"iter"`
	Samples uint64  `json:"samples"`
	Loss    float64 `json:"loss"` // training loss of the last mini-batch
	// StartLoss is the job's loss at its start as this worker measured it,
	// when its first gradient was on θ₀ (no sample applied anywhere yet):
	// that gradient's training loss, or the test loss of θ₀ where the compute
	// reports none (an external trainer whose loop gives step() no loss:
	// worker.StartLoss). 0 when the worker joined later. The learning
	// check's reference (node/eval).
	StartLoss float64 `json:"start_loss,omitempty"`
	// Evaluator is the worker shard 0's last OK named for the evaluation
	// lease ("" before one).
	Evaluator      string  `json:"evaluator,omitempty"`
	ComputeSeconds float64 `json:"compute_seconds"`
	WaitSeconds    float64 `json:"wait_seconds"` // pushing and held by gates
	Retries        uint64  `json:"retries"`
	ItersPerSec    float64 `json:"iters_per_sec"` // over the last few seconds
	Slowdown       float64 `json:"slowdown"`
	LastError      string  `json:"last_error,omitempty"`
	// Refused counts this worker's gradients a shard refused (NaN/Inf, norm
	// outlier, non-finite step); each was recomputed and sent again.
	Refused uint64 `json:"refused"`
	// SlicesKept and SlicesPulled count the acknowledged pushes whose OK
	// carried no parameters (the worker's copy of the slice was fresh
	// enough: docs/design.md, "The read guarantee") and those that carried them.
	SlicesKept   uint64 `json:"slices_kept"`
	SlicesPulled uint64 `json:"slices_pulled"`
	// Stopped says why the worker loop stopped for good ("" while it runs):
	// a diverging job, a rejection it cannot repair.
	Stopped string `json:"stopped,omitempty"`
	// Batch is the worker's mini-batch (the job's, or under --balance the
	// latest assignment of shard 0); GlobalBatch the sum over the mesh,
	// AllocVersion the allocation's version and PredictedSeconds the
	// balancer's predicted compute time of Batch (0 before it has a model),
	// under --balance only.
	Batch            int64   `json:"batch"`
	GlobalBatch      int64   `json:"global_batch,omitempty"`
	AllocVersion     uint64  `json:"alloc_version,omitempty"`
	PredictedSeconds float64 `json:"predicted_seconds,omitempty"`
	// LocalSteps is the local steps of the round the worker computes now
	// (docs/design.md, "Local rounds"): the job's --local-steps H, or
	// under --balance its assigned round's samples ÷ the job's batch; 1
	// without local rounds (every push a gradient).
	LocalSteps int `json:"local_steps"`
	// StepsReason says why, under --local-steps auto: the push's time on
	// the wire and a step's compute that chose LocalSteps.
	StepsReason string `json:"steps_reason,omitempty"`
	// The data path's costs, for `dssp-lab bench mesh`: PushBytes are the
	// tensor bytes this worker's pushes sent and their replies returned;
	// ReplicatedBytes the push entries the shard leaders on this node
	// proposed, times their followers; LogWrites the Raft log writes (one
	// fsync each on disk) of every replica on this node. Since each
	// replica opened; a reopened replica starts over.
	PushBytes       uint64 `json:"push_bytes"`
	ReplicatedBytes uint64 `json:"replicated_bytes"`
	LogWrites       uint64 `json:"log_writes"`
}

// EvalResult is one evaluation of the global parameters.
type EvalResult struct {
	Accuracy float64   `json:"accuracy"`
	Loss     float64   `json:"loss"`
	Samples  int       `json:"samples"`
	At       time.Time `json:"at"`
	By       string    `json:"by"`
	// Iter is the training clock of the parameters evaluated: the lowest
	// t_min over the shards read (see "Model snapshots" in node/eval's package doc).
	Iter uint64 `json:"iter"`
	// Seq orders evaluations mesh-wide: the samples the shards had applied
	// (summed over shards, Raft-replicated state) when they sent the
	// parameters evaluated. Newer parameters have a larger Seq whichever
	// node evaluated them and whatever its clock says.
	Seq uint64 `json:"seq"`
	// Diverged: the loss was NaN or ±Inf (Loss then reads null); every
	// worker stops on receiving it.
	Diverged bool `json:"diverged,omitempty"`
	// Digest is the SHA-256 (hex) of the model file the evaluator
	// scored: the exact bytes GET /model.safetensors?evaluated serves
	// (node/eval's digest.go). Empty from builds before it.
	Digest string `json:"digest,omitempty"`
	// Key is the evaluator's ed25519 node key and Sig its signature of
	// the claim (node/eval's digest.go): a self-certifying By must be
	// derived from Key.
	Key []byte `json:"key,omitempty"`
	Sig []byte `json:"sig,omitempty"`
}

// AuditResult is one re-evaluation, by this node, of an evaluator's claim
// (node/eval's audit.go): the file the claim names, fetched through the
// evaluator and checked against shard 0's record, scored here.
type AuditResult struct {
	At time.Time `json:"at"`
	// By, Seq, Digest, Claimed and ClaimedSamples are the claim's.
	By             string  `json:"by"`
	Seq            uint64  `json:"seq"`
	Digest         string  `json:"digest"`
	Claimed        float64 `json:"claimed"`
	ClaimedSamples int     `json:"claimed_samples"`
	// Measured on Samples test samples here, and the largest difference
	// sampling noise explains (Tolerance).
	Measured  float64 `json:"measured"`
	Samples   int     `json:"samples"`
	Tolerance float64 `json:"tolerance"`
	Agrees    bool    `json:"agrees"`
}

// DigestHeader carries, in a response to GET
// /model.safetensors?evaluated, the digest (EvalResult.Digest) of the
// evaluation claim whose file it is: the client checks the bytes it got
// against it (nodeclient.FetchModel).
const DigestHeader = "X-Dssp-Digest"

// Revocation is one revoked node id and the operator's MAC of it
// (mesh.MeshKey.OperatorMAC): what a node's mesh view passes on
// (node/status.PeerView) and node/trust takes in.
type Revocation struct {
	ID  string `json:"id"`
	MAC []byte `json:"mac"`
}

// ExternalTrainer is a node's trainer socket (--trainer external) and the
// trainer process attached to it.
type ExternalTrainer struct {
	Socket   string `json:"socket"`
	Attached bool   `json:"attached"`
	// PID is the attached trainer's process id (SO_PEERCRED); 0 if unknown.
	PID int `json:"pid,omitempty"`
	// Attachments counts the trainers attached since the node started;
	// Iterations the updates they sent.
	Attachments int    `json:"attachments"`
	Iterations  uint64 `json:"iterations"`
	// Tensors and Params are the size of the job's layout (the trainers'
	// model); 0 while a new external job waits for its first trainer to
	// fix it.
	Tensors int `json:"tensors"`
	Params  int `json:"params"`
	// Waiting says what waits for a trainer: the job's layout (the
	// bootstrap node of a new external job), or the evaluation.
	Waiting string `json:"waiting,omitempty"`
	// The bridge's cost per iteration over the current attachment: θ
	// copied into shared memory (bytes and µs), the compute request's
	// round trip and, when the trainer reports it, the trainer's own part.
	BytesCopiedPerIter float64 `json:"bytes_copied_per_iter"`
	CopyMicros         float64 `json:"copy_us"`
	RoundTripMicros    float64 `json:"round_trip_us"`
	TrainerMicros      float64 `json:"trainer_us,omitempty"`
	// LR is the learning rate the attached trainer's optimizer stepped at
	// in its last update (its first param group's), 0 when it says none.
	LR float64 `json:"lr,omitempty"`
}
