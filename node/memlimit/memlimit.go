package memlimit

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"dsspmesh/shardapi"
)

// The terms of the automatic limit (see the package comment).
const (
	base     = 64 << 20
	shares   = 3.5
	perShard = 1 << 20
	round    = 1   // the worker's copy of θ a round steps (Rounds.Steps)
	outer    = 1.5 // headroom of a job under the outer Nesterov (Rounds.Outer)
)

// Rounds is what a job of local rounds keeps beyond a job without them.
type Rounds struct {
	// Steps: the node's own worker takes the rounds' steps over its copy
	// of θ, stepped in place as each gradient forms (an external trainer
	// holds that copy in its own process).
	Steps bool
	// Outer: the shards apply the outer Nesterov rule, whose momentum
	// moves at every arrival: a snapshot an arrival meets has θ and the
	// momentum of its replica stepped in a copy (shard's thawLocked), and
	// the rounds' pushes, entries and replies of the whole model arrive
	// together. Its share is headroom measured, not a count of buffers:
	// see the package comment.
	Outer bool
}

// Auto and Off are the special values of a node's Config.MemoryLimit.
const (
	Auto = -1
	Off  = 0
)

// Parse reads --memory-limit: "auto", "off", or a size in MiB.
func Parse(s string) (int64, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto", "":
		return Auto, nil
	case "off", "0":
		return Off, nil
	}
	mib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(s), "MiB"), 10, 64)
	if err != nil || mib < 1 || mib > 1<<30 {
		return 0, fmt.Errorf("--memory-limit %q: want auto, off or a size in MiB (e.g. 512)", s)
	}
	return mib << 20, nil
}

// For is the limit a node sets for a job whose gradients travel in prec,
// with r its local rounds' share (see the package comment).
func For(modelBytes, datasetBytes int64, shards int, prec shardapi.Precision, r Rounds) int64 {
	encodings := int64(prec.Bytes(int(modelBytes / 4)))
	if prec == shardapi.INT8 || prec == shardapi.INT4 {
		encodings += int64(shardapi.INT8.Bytes(int(modelBytes / 4))) // the residual, in int8's layout
	}
	sh := float64(shares)
	if r.Steps {
		sh += round
	}
	if r.Outer {
		sh += outer
	}
	return base + datasetBytes + int64(math.Ceil(sh*float64(modelBytes))) + encodings + int64(shards)*perShard
}

// Apply sets the soft memory limit for cfg (a GOMEMLIMIT in the
// environment wins over Auto) and returns it (0: none set).
func Apply(cfg int64, modelBytes, datasetBytes int64, shards int, prec shardapi.Precision, r Rounds) int64 {
	limit := cfg
	switch {
	case cfg == Off:
		return 0
	case cfg == Auto && os.Getenv("GOMEMLIMIT") != "":
		return 0
	case cfg == Auto:
		limit = For(modelBytes, datasetBytes, shards, prec, r)
	}
	debug.SetMemoryLimit(limit)
	return limit
}

// Flag is --memory-limit as a pflag.Value over the int64 it points to.
type Flag struct{ V *int64 }

func (f Flag) Type() string { return "limit" }
func (f Flag) String() string {
	switch *f.V {
	case Auto:
		return "auto"
	case Off:
		return "off"
	}
	return strconv.FormatInt(*f.V>>20, 10)
}
func (f Flag) Set(s string) error {
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*f.V = v
	return nil
}
