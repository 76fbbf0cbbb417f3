package shard

import "dsspmesh/shardapi"

// The shard's surface that needs no raft — the worker's client, the RPC
// protocol, errors, Spec and the reports — lives in shardapi, so node can
// use it without depending on raft. These are its names as the replica's
// own code uses them.

type (
	Spec           = shardapi.Spec
	Optimizer      = shardapi.Optimizer
	OptimizerKind  = shardapi.OptimizerKind
	Schedule       = shardapi.Schedule
	Reason         = shardapi.Reason
	RejectError    = shardapi.RejectError
	NotLeaderError = shardapi.NotLeaderError
	Applied        = shardapi.Applied
	PushResult     = shardapi.PushResult
	Status         = shardapi.Status
	ReplicaStatus  = shardapi.ReplicaStatus
	ServiceStats   = shardapi.ServiceStats
	Slice          = shardapi.Slice
	Configuration  = shardapi.Configuration
	WorkerRefusals = shardapi.WorkerRefusals

	request     = shardapi.Request
	reply       = shardapi.Reply
	replyStatus = shardapi.ReplyStatus
)

const (
	SGD      = shardapi.SGD
	Momentum = shardapi.Momentum

	MinOutlierFactor = shardapi.MinOutlierFactor
	RepeatOffender   = shardapi.RepeatOffender
	MaxOutlierFactor = shardapi.MaxOutlierFactor
	maxShardLen      = shardapi.MaxShardLen

	ReasonBadLength      = shardapi.ReasonBadLength
	ReasonNonFinite      = shardapi.ReasonNonFinite
	ReasonUnknownWorker  = shardapi.ReasonUnknownWorker
	ReasonFuture         = shardapi.ReasonFuture
	ReasonWaiting        = shardapi.ReasonWaiting
	ReasonNotInitialized = shardapi.ReasonNotInitialized
	ReasonBadRequest     = shardapi.ReasonBadRequest
	ReasonNotPeer        = shardapi.ReasonNotPeer
	ReasonOutlier        = shardapi.ReasonOutlier
	ReasonNonFiniteStep  = shardapi.ReasonNonFiniteStep
	numReasons           = shardapi.NumReasons

	opPush         = shardapi.OpPush
	opAddWorker    = shardapi.OpAddWorker
	opRemoveWorker = shardapi.OpRemoveWorker
	opStatus       = shardapi.OpStatus
	opRead         = shardapi.OpRead

	statusOK        = shardapi.ReplyOK
	statusHeld      = shardapi.ReplyHeld
	statusNotLeader = shardapi.ReplyNotLeader
	statusRejected  = shardapi.ReplyRejected
	statusError     = shardapi.ReplyError
)

var (
	ErrNotInitialized = shardapi.ErrNotInitialized
	ErrBadEntry       = shardapi.ErrBadEntry
	ErrBadSnapshot    = shardapi.ErrBadSnapshot
	ErrRejected       = shardapi.ErrRejected
	ErrNotLeader      = shardapi.ErrNotLeader
	ErrDeadline       = shardapi.ErrDeadline
	ErrReconfigActive = shardapi.ErrReconfigActive
)
