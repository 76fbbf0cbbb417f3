package node

import (
	"dsspmesh/node/records"
	"dsspmesh/node/status"
)

// The status room's records (node/status), named here for the callers of
// node.
type (
	Status        = status.Status
	MemberStatus  = status.MemberStatus
	TrainerStatus = status.TrainerStatus
	// ExternalTrainerStatus is Status.Trainer: the trainer socket.
	ExternalTrainerStatus = status.ExternalTrainer
	EvalResult            = records.EvalResult
	TransportStatus       = status.TransportStatus
	Metrics               = status.Metrics
	History               = status.History
	HistoryRecord         = status.HistoryRecord
	HistoryShare          = status.HistoryShare
	HistoryRead           = status.HistoryRead
	HistoryPush           = status.HistoryPush
	HistoryRelease        = status.HistoryRelease
)

// HistoryHashEvery is how often (in raft indices) applied records carry
// the state hash.
const HistoryHashEvery = status.HistoryHashEvery

// NewMetrics is [status.NewMetrics] for a node's [Status].
func NewMetrics(st func() Status) *Metrics { return status.NewMetrics(st) }

// OpenHistory is [status.OpenHistory].
var OpenHistory = status.OpenHistory

// CountLibraryTelemetry is [status.CountLibraryTelemetry].
func CountLibraryTelemetry() { status.CountLibraryTelemetry() }

// The records the rooms share (node/records), named here for the callers
// of node.
type (
	LocalWorker   = records.LocalWorker
	ShardStatus   = records.ShardStatus
	WorkerStatus  = records.WorkerStatus
	RefusalStatus = records.RefusalStatus
	SliceRead     = records.SliceRead
	Observer      = records.Observer
	Event         = records.Event
)

// Event kinds in [Status].Events (node/records).
const (
	EventJoin     = records.EventJoin
	EventLeave    = records.EventLeave
	EventFailed   = records.EventFailed
	EventSuspect  = records.EventSuspect
	EventLeader   = records.EventLeader
	EventRejected = records.EventRejected

	EventQuorumLost     = records.EventQuorumLost
	EventQuorumRegained = records.EventQuorumRegained
)
