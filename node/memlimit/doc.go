// Package memlimit is a node's soft memory limit
// (runtime/debug.SetMemoryLimit, --memory-limit): its flag and the limit
// a node sets once it knows its job. It holds no state of its own; the
// node calls [Apply] once, after loading its model and dataset.
//
// A node's heap is mostly pointer-free float32 slices (the worker's
// parameters and its gradient's encodings, its shards' parameters and
// optimizer state, the dataset's bytes), which the garbage collector marks
// for almost nothing, so keeping the heap near its live size costs little
// CPU; with GOGC alone the heap grows to twice its live size between
// collections. Once the job is known the node sets, unless told otherwise,
//
//	limit = base + dataset bytes + shares × model bytes
//	        + the worker's gradient encodings + perShard × shards
//
// shares (3.5) covers the worker's parameters (1×), its share of the
// shards with their optimizer state (2 × replication ÷ nodes, 1.5× for 3
// of 4) and a slice in flight (1×); the encodings are what the worker
// keeps of its gradient (shardapi.Encoder: the wire encoding, and under
// int8 the error-feedback residual too — half the model's bytes under
// int8 and bf16, all of it under fp32); base (64 MiB) the runtime, the
// transport's buffers and raft; perShard (1 MiB) each Raft group's own
// (its log cache, buffers and goroutines: about 1 MiB a group in dssp-lab bench
// scale), for every shard of the job, since a fresh mesh's bootstrap node
// hosts all of them until placement spreads them. A job of local rounds
// adds ([Rounds]) 1 × the model for a worker that takes the rounds' steps
// itself (the round's copy of θ, stepped in place as each gradient forms;
// an external trainer holds it in its own process) and, under the outer
// Nesterov rule, 1.5 × the model of headroom: its momentum moves at every
// arrival, so a snapshot an arrival meets is stepped in a copy of its
// replica's θ and momentum, and a round's pushes, entries and replies of
// the whole model arrive together. Without the two a 95 MiB model at
// --local-steps 16 had a live heap of 700 MB under a 484 MB limit and
// collected garbage 25 times a second (dssp-lab bench bigmodel); with them,
// and the outer state of θ and the momentum only (no buffer), its nodes'
// live heaps were 492–546 MiB under a 699 MiB limit (the terms without
// the headroom: 557 MiB) and collected 54–101 times in 5 minutes. Without any limit the bootstrap
// node of a 64-shard host-only mesh had a 68 MiB limit and spent half its
// CPU collecting garbage while the mesh formed. It is a soft limit: a live
// heap above it makes the collector run more often (at most about half the
// CPU, by the runtime's own cap), never fails an allocation. A GOMEMLIMIT
// in the environment wins over auto. The rest of a node's memory is
// bounded elsewhere: datasets are held as bytes (cudaops), and each
// shard's raft log and its cache are bounded by bytes
// (shard.Config.LogBytes, raftstore).
//
// # Concurrency
//
// Stateless; [Flag] writes the int64 it wraps, at flag parsing.
package memlimit
