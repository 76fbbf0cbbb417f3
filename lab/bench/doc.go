// Package bench is `dssp-lab bench`: the paper's comparison of synchronization
// paradigms reproduced on real local meshes, the mesh's own costs, and
// PyTorch trainers through the mesh against PyTorch DDP, each measured
// against a baseline in the same run.
//
// # Paradigms
//
// [RunParadigms] starts, for every paradigm variant (BSP, ASP, SSP at each
// s, bounded DSSP and dssp-paper) and every setting (homogeneous, and
// heterogeneous through the nodes' --slowdown, which stretches only the
// compute time each worker measures), a real mesh of `dssp node` processes
// on loopback through node/launch, and watches it until the highest target
// accuracy or the time limit. Every variant runs the same job spec (model,
// data, batch, learning-rate schedule counted in global samples); only the
// paradigm changes. Each cell is repeated and the median reported; a
// target not reached within the limit counts as infinitely late, so a
// median of "not reached" says so instead of hiding the run. A time to a
// target runs from the moment every node process was started (the bootstrap
// node answering) to the first evaluation at or above it, so it includes
// the mesh forming and the workers joining.
// [LoadCosts] reads a finished run's per-poll worker counters back and
// splits each worker's steady iteration into compute and wait (the mesh's
// cost per iteration where no gate holds the worker), with the spread of
// the workers' iterations and the iteration at which each target fell.
//
// # Mesh
//
// [RunMesh] measures, in one process and one run, each cost next to its
// baseline: the QUIC transport against raw quic-go with the same TLS; pushes
// through a Raft-replicated shard (1 and R replicas, over the QUIC
// transport) against an unreplicated echo of the same payload on the same
// transport; the gate's per-push cost against ASP's; and the iterations/s
// of N worker processes through a real mesh against N goroutines training
// the same model on an in-process parameter store with no network. The
// mesh's data-path figures (wire bytes and fsyncs per worker-iteration, the
// largest node's peak RSS and its data dir once the nodes have stopped)
// sit beside a baseline binary's, measured in the same run.
//
// # Scale
//
// [RunScale] starts, for every N × S, N host-only nodes on loopback and
// measures formation, idle costs per node, one node joining and leaving,
// and training costs. A poll counts as settled only when every node
// answered, all list the same members, and every shard's leader has as
// Raft voters exactly the replicas placement (mesh.PlaceAll) gives
// it over those members; replicas moved on a join or leave are counted
// between two such polls, so a node missing from a poll, or a leader whose
// placement followed a membership view missing a node, is waited out
// instead of counted. Nodes are started through launch.Mesh.WaitUp, which
// restarts one whose port was taken before it bound on fresh ports.
//
// # PyTorch
//
// [RunPyTorch] trains the MNIST MLP (784-256-128-10), for each setting
// (equal workers, and per-worker slowdowns), three ways back to back: the
// PyTorch model of examples/pytorch/mnist_mlp.py through a mesh of `dssp
// node --trainer external` with one trainer process per node (launch's
// Config.Trainer, as `dssp up --trainer` starts them), the built-in Go MLP
// through the same mesh, and PyTorch DistributedDataParallel over gloo
// (examples/pytorch/mnist_ddp.py) with as many ranks, all on the same
// batch, learning rate and schedule, threads per worker and target. A
// slowdown stretches only measured compute on both sides: the nodes'
// --slowdown (worker.Emulate) and mnist_ddp.py's --slowdowns (a DDP
// communication hook that sleeps before each bucket's allreduce). It
// reports each training's time to the target (a mesh's from all its nodes
// started, and apart its start-up until its first iteration; DDP's from its
// process group formed, evaluations not counted),
// samples/s and final accuracy, and for the PyTorch mesh the bridge's own
// cost per iteration as each node measured it (/status trainer: θ's copy
// into shared memory plus the compute request's round trip less the
// trainer's reported compute, and the bytes copied) and as each trainer
// measured it (dsspmesh's statistics in its log), over the worker's mean
// iteration. [PyTorchResult.Ratios] sets those figures against each other
// and against the targets: mesh-PyTorch ÷ DDP time to target (≤ 0.6
// on equal workers, ≤ 0.4 with slowdowns) and bridge ÷ iteration (≤ 10 %);
// a ratio whose trainings did not both reach the target is reported as not
// measured. The Python interpreter is internal/python.Find's: $DSSP_PYTHON, else
// the first of python3 and /usr/bin/python3 that imports torch and numpy.
//
// # What it builds on
//
// Meshes are real `dssp node` processes started through node/launch and
// read through nodeclient. The replicated-push measurement opens its
// shard replicas through node/assemble's RaftReplicas (a node's own
// wiring: raft stores, raft transport over the mesh, shard timing), with
// in-memory raft stores unless a folder is given, and pushes through
// shardapi's client as a worker does. Two pieces use lower-level public
// packages on purpose, because what they measure is that layer alone:
// the transport measurement sets mesh's QUIC transport against raw
// quic-go (mesh.NewRawQUIC) with the same TLS, and the gate measurement
// drives a clock.Gate directly, with no shard around it. No file here
// imports shard or raftstore.
//
// # Contract
//
// Every measurement is bounded: meshes by a time limit, in-process loops by
// a duration, and every network call by a context deadline. Progress goes to
// the configured writer; logs to the *slog.Logger passed in. Nothing here
// asserts a speed: figures are reported, ratios are computed against the
// baseline measured in the same call. Results are plain structs so the
// command renders them and benchmarks report them.
package bench
