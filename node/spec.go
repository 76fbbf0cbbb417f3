package node

import "dsspmesh/node/job"

// The job spec (node/job), named here for the callers of node.
type (
	JobSpec           = job.Spec
	SpecConflictError = job.ConflictError
)

// DefaultPipelineFresh and AutoShardBytes are job's.
const (
	DefaultPipelineFresh = job.DefaultPipelineFresh
	AutoShardBytes       = job.AutoShardBytes
	// ExternalModel is the --model of a job whose model an external
	// trainer holds (--trainer external).
	ExternalModel = job.ExternalModel
)

// DefaultJobSpec is [job.DefaultSpec].
func DefaultJobSpec() JobSpec { return job.DefaultSpec() }

// MarshalSpec and UnmarshalSpec are [job.Marshal] and [job.Unmarshal]:
// the spec's persisted and wire form.
func MarshalSpec(s JobSpec) ([]byte, error) { return job.Marshal(s) }

// UnmarshalSpec decodes and validates a spec from disk or a peer.
func UnmarshalSpec(b []byte) (JobSpec, error) { return job.Unmarshal(b) }

// LoadInitFrom is [job.LoadInitFrom]: --init-from's parameters, read by
// the assembler before the data dir is opened.
var LoadInitFrom = job.LoadInitFrom
