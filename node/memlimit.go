package node

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"dsspmesh/shardapi"
)

// The node's soft memory limit (runtime/debug.SetMemoryLimit). A node's
// heap is mostly pointer-free float32 slices (the worker's parameters and
// its gradient's encodings, its shards' parameters and optimizer state, the
// dataset's bytes), which the garbage collector marks for almost nothing,
// so keeping the heap near its live size costs little CPU; with GOGC alone
// the heap grows to twice its live size between collections. Once the job
// is known the node sets, unless told otherwise,
//
//	limit = memLimitBase + dataset bytes + memLimitShares × model bytes
//	        + the worker's gradient encodings + memLimitPerShard × shards
//
// memLimitShares covers the worker's parameters (1×), its share of the
// shards with their optimizer state (2 × replication ÷ nodes, 1.5× for 3
// of 4) and a slice in flight (1×); the encodings are what the worker
// keeps of its gradient (shardapi.Encoder: the wire encoding, and under
// int8 the error-feedback residual too — half the model's bytes under
// int8 and bf16, all of it under fp32); memLimitBase the runtime, the
// transport's buffers and raft; memLimitPerShard each Raft group's own
// (its log cache, buffers and goroutines: about 1 MiB a group in dssp bench
// scale), for every shard of the job, since a fresh mesh's bootstrap node
// hosts all of them until placement spreads them. A job of local rounds
// adds memLimitRound × the model for a worker that takes the rounds'
// steps itself (worker.LocalRounds: the round's local copy of θ, stepped
// in place as each gradient forms; an external trainer holds it in its
// own process)
// and memLimitOuterBuf × the model for the outer Nesterov's buffer of
// pseudo-gradients beside θ and the momentum in the node's shards (one
// model's worth at most: replication ÷ nodes of it) and its copy while
// a snapshot writes it (an Apply then steps copies of the state). Without them a 95
// MiB model at --local-steps 16 had a live heap of 700 MB under a 484 MB
// limit, and collected garbage 25 times a second (dssp bench bigmodel).
// Without it the bootstrap
// node of a 64-shard host-only mesh had a 68 MiB limit and spent half its
// CPU collecting garbage while the mesh formed. It is a soft limit: a live
// heap above it makes the collector run more often (at most about half the
// CPU, by the runtime's own cap), never fails an allocation.
const (
	memLimitBase     = 64 << 20
	memLimitShares   = 3.5
	memLimitPerShard = 1 << 20
	memLimitRound    = 1
	memLimitOuterBuf = 1.5
)

// MemoryLimitAuto and MemoryLimitOff are the special values of
// Config.MemoryLimit.
const (
	MemoryLimitAuto = -1
	MemoryLimitOff  = 0
)

// ParseMemoryLimit reads --memory-limit: "auto", "off", or a size in MiB.
func ParseMemoryLimit(s string) (int64, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto", "":
		return MemoryLimitAuto, nil
	case "off", "0":
		return MemoryLimitOff, nil
	}
	mib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(s), "MiB"), 10, 64)
	if err != nil || mib < 1 || mib > 1<<30 {
		return 0, fmt.Errorf("--memory-limit %q: want auto, off or a size in MiB (e.g. 512)", s)
	}
	return mib << 20, nil
}

// autoMemoryLimit is the limit a node sets for a job whose gradients
// travel in prec, with rounds its local rounds' share (see above).
func autoMemoryLimit(modelBytes, datasetBytes int64, shards int, prec shardapi.Precision, rounds roundsMemory) int64 {
	encodings := int64(prec.Bytes(int(modelBytes / 4)))
	if prec == shardapi.INT8 {
		encodings *= 2 // the residual, in int8's own layout
	}
	shares := float64(memLimitShares)
	if rounds.steps {
		shares += memLimitRound
	}
	if rounds.outerBuf {
		shares += memLimitOuterBuf
	}
	return memLimitBase + datasetBytes + int64(math.Ceil(shares*float64(modelBytes))) + encodings + int64(shards)*memLimitPerShard
}

// roundsMemory is what a job of local rounds keeps beyond a job without
// them: steps, the worker's copy of θ (the node's own worker takes the
// rounds' steps); outerBuf, the outer Nesterov's buffer in the shards.
type roundsMemory struct{ steps, outerBuf bool }

// applyMemoryLimit sets the soft memory limit for cfg (a GOMEMLIMIT in
// the environment wins over auto) and returns it (0: none set).
func applyMemoryLimit(cfg int64, modelBytes, datasetBytes int64, shards int, prec shardapi.Precision, rounds roundsMemory) int64 {
	limit := cfg
	switch {
	case cfg == MemoryLimitOff:
		return 0
	case cfg == MemoryLimitAuto && os.Getenv("GOMEMLIMIT") != "":
		return 0
	case cfg == MemoryLimitAuto:
		limit = autoMemoryLimit(modelBytes, datasetBytes, shards, prec, rounds)
	}
	debug.SetMemoryLimit(limit)
	return limit
}

// memLimitFlag is --memory-limit as a pflag.Value over Config.MemoryLimit.
type memLimitFlag struct{ v *int64 }

func (f memLimitFlag) Type() string { return "limit" }
func (f memLimitFlag) String() string {
	switch *f.v {
	case MemoryLimitAuto:
		return "auto"
	case MemoryLimitOff:
		return "off"
	}
	return strconv.FormatInt(*f.v>>20, 10)
}
func (f memLimitFlag) Set(s string) error {
	v, err := ParseMemoryLimit(s)
	if err != nil {
		return err
	}
	*f.v = v
	return nil
}
