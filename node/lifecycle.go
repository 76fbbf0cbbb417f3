package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
	"dsspmesh/node/eval"
	"dsspmesh/node/job"
	"dsspmesh/node/join"
	"dsspmesh/node/memlimit"
	"dsspmesh/node/records"
	"dsspmesh/node/shards"
	"dsspmesh/node/status"
	"dsspmesh/node/worker"
	"dsspmesh/shardapi"
)

// Run starts a node on d, serves until ctx ends (SIGTERM/SIGINT in the
// command) and then leaves gracefully. explicit reports whether a flag was
// set by the user (command line, environment or config file): only those
// may conflict with the mesh's job spec. Run owns d (see [Deps]).
//
// It builds the node (newNode), serves HTTP and the control channel,
// settles the job (settleJob: join or bootstrap, the model and data
// loaded), opens the shards and then, as hashicorp/raft's NewRaft ends,
// starts the node's named loops (startLoops); once ctx ends it leaves.
func Run(ctx context.Context, cfg Config, explicit func(flag string) bool, d Deps) error {
	defer d.Dir.Close()
	defer d.Membership.Shutdown()
	defer d.Transport.Close()
	if d.HTTP != nil {
		defer d.HTTP.Close()
	}
	if c, ok := d.Observer.(io.Closer); ok {
		defer c.Close() // after the replicas: every return path shuts them down first
	}
	ctx, stopRun := context.WithCancelCause(ctx) // cause ErrRevoked: Node.revoked
	defer stopRun(nil)
	n, err := newNode(cfg, d)
	if err != nil {
		return err
	}
	n.stopRun = stopRun
	ctlLn, err := n.tr.Listen(controlChannel)
	if err != nil {
		return err
	}
	defer ctlLn.Close()
	ctlCtx, stopCtl := context.WithCancel(context.Background())
	defer stopCtl()
	var srv *http.Server
	if d.HTTP != nil {
		srv = n.serveHTTP(ctlCtx, d.HTTP)
		defer srv.Close()
	}
	n.wg.Go(func() { n.serveControl(ctlCtx, ctlLn) })
	n.wg.Go(func() { n.events.FollowMembership(ctlCtx, n.members.Events()) })

	defer func() {
		if n.ext != nil {
			n.ext.Close("node stopped")
		}
	}()
	spec, fresh, err := n.settleJob(ctx, ctlCtx, explicit)
	if err != nil {
		return err
	}
	if err := n.openShards(ctx, spec, fresh); err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(context.Background())
	if err := n.startLoops(runCtx, spec); err != nil {
		stop()
		n.shards.Shutdown()
		return err
	}
	if cfg.Train {
		n.setPhase("training")
	} else {
		n.setPhase("hosting") // up, hosting its shards, no worker (--train=false)
	}
	n.log.Info("node up", "gossip", n.members.LocalNode().Addr, "quic", n.tr.Addr())

	<-ctx.Done()
	n.leave(stop)
	stopCtl()
	ctlLn.Close()
	n.tr.Close()
	n.wg.Wait()
	n.setPhase("stopped")
	if srv != nil {
		shutCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Debug("http shutdown", "err", err)
		}
	}
	if err := context.Cause(ctx); errors.Is(err, ErrRevoked) {
		return err
	}
	return nil
}

// newNode builds the node on d: cfg checked, --init-from's parameters
// read, the trust room, the metrics and the snapshot room (with its
// checkpoints); it starts nothing.
func newNode(cfg Config, d Deps) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	now := d.Now
	if now == nil {
		now = time.Now
	}
	obs := d.Observer
	if obs == nil {
		obs = records.NoObserver{}
	}
	initTheta := d.InitParams
	if initTheta == nil {
		var err error
		if initTheta, err = job.LoadInitFrom(cfg.Spec); err != nil {
			return nil, err
		}
	}
	log := d.Logger.With("node", d.Dir.ID)
	n := &Node{cfg: cfg, log: log, id: d.Dir.ID, dir: d.Dir, tr: d.Transport, members: d.Membership,
		replicas: d.Replicas, obs: obs, now: now, started: now(), phase: "starting", events: status.NewEventLog(now).LogTo(log), initTheta: initTheta}
	n.claims = n.newClaims()
	if err := n.startTrust(d); err != nil {
		return nil, err
	}
	n.metrics = status.NewMetrics(n.Status)
	if cfg.Train {
		n.metrics.RegisterWorker() // a node that does not train exports no dssp_worker_* counters
	}
	ckpt, err := eval.OpenCheckpointer(cfg.CheckpointDir, cfg.CheckpointKeep, cfg.CheckpointEvery)
	if err != nil {
		return nil, err
	}
	n.snaps = eval.New(eval.Deps{ID: n.id, Transport: n.tr, Members: n.members, Job: n.evalJob, Evaluator: n.evaluator, Logger: n.log, Now: n.now,
		AskControl: n.askControl, Key: n.dir.NodeKey, Event: n.events.Add,
		Claim: func(ctx context.Context, peer mesh.NodeID, e records.EvalResult) error {
			return n.claims.Receive(ctx, peer, e)
		}}, ckpt)
	return n, nil
}

// serveHTTP serves /status, /metrics, the dashboard, the model and POST
// /revoke on ln, and samples the dashboard's history (/status/history)
// every second until ctx ends; the caller closes the server.
func (n *Node) serveHTTP(ctx context.Context, ln net.Listener) *http.Server {
	n.httpAddr = advertisedHTTP(ln.Addr().String(), n.tr.Addr())
	if w := HTTPExposureWarning(ln.Addr().String()); w != "" {
		n.log.Warn(w)
	}
	h := eval.WithModel(status.NewHTTPHandler(n.Status, n.metrics), n.snaps.ServeModel)
	h = n.trust.WithRevoke(h)
	series := status.NewSeries(status.SeriesEvery, status.SeriesCapacity, status.SeriesMaxWorkers)
	h = status.WithSeries(h, series)
	n.wg.Go(func() {
		tick := time.NewTicker(status.SeriesEvery)
		defer tick.Stop()
		series.Run(ctx, tick.C, n.Status)
	})
	if n.cfg.Pprof {
		h = status.WithPprof(h)
	}
	srv := status.NewServer(h)
	go srv.Serve(ln)
	return srv
}

// settleJob joins the mesh or bootstraps it and settles the job: the spec
// adopted (and persisted once the model and the dataset are loaded), the
// trainer socket listening until ctlCtx ends (--trainer external), an
// external job's layout, the compute loaded and the mesh key's
// fingerprint recorded. fresh is true when this node bootstraps a new mesh.
func (n *Node) settleJob(ctx, ctlCtx context.Context, explicit func(string) bool) (spec job.Spec, fresh bool, err error) {
	n.setPhase("joining")
	fresh, persist, err := n.joinAndAdoptSpec(ctx, explicit)
	if err != nil {
		return spec, false, err
	}
	spec = *n.jobSpec()
	n.log.Info("job", "spec", spec.PolicyText(), "model", spec.Model, "shards", spec.Shards, "replication", spec.Replication, "fresh", fresh)
	if w := spec.ReplicationWarning(); w != "" {
		n.log.Warn(w)
	}
	var fileTensors cudaops.Layout // --init-from's tensors, for the first trainer to order
	if spec.External() && spec.Layout == "" && spec.InitFrom != "" {
		if spec, fileTensors, err = n.layoutFromFile(spec); err != nil {
			return spec, false, err
		}
	}
	if n.cfg.externalTrainer() {
		if err := n.startTrainerSocket(ctlCtx, spec, fileTensors); err != nil {
			return spec, false, err
		}
		if !spec.External() {
			n.log.Warn("--trainer external on a job of a built-in model: this node trains nothing, and trainers are refused (not-external)", "model", spec.Model)
		}
	}
	if spec.External() && spec.Layout == "" {
		if spec, err = n.awaitLayout(ctx, spec); err != nil {
			return spec, false, err
		}
	}
	if err := n.loadCompute(spec); err != nil {
		return spec, false, err
	}
	// The spec is persisted once the model and the dataset are loaded, before
	// the first Raft state: a start that fails before (a missing --data, a
	// model that cannot be built) leaves no spec to disagree with the retry's
	// flags, and a node killed from here on restarts from its spec.
	if persist {
		if err := n.dir.SetSpec(spec); err != nil {
			return spec, false, err
		}
	}
	// The mesh key's fingerprint likewise (DataDir.CheckKey); a data dir
	// an older build wrote gets it on this start.
	if wrote, err := n.dir.RecordKey(); err != nil {
		return spec, false, err
	} else if wrote && !persist {
		n.log.Info("recorded the mesh key's fingerprint in the data dir: a later start with another key is refused", "dir", n.dir.Path)
	}
	// Admitted: the spec is the mesh's and the data dir agrees with it,
	// so placement may count this node (a joiner refused before here never
	// became a replica: mesh.Meta.Joining).
	if me := n.members.LocalNode().Meta; me.Joining {
		me.Joining = false
		if err := n.members.UpdateMeta(me); err != nil {
			return spec, false, fmt.Errorf("announce that this node joined: %w", err)
		}
	}
	return spec, fresh, nil
}

// openShards builds the shard manager room for spec and opens this
// node's replicas (bootstrapping every shard's group when fresh).
func (n *Node) openShards(ctx context.Context, spec job.Spec, fresh bool) error {
	sm := n.newShards(spec)
	n.mu.Lock()
	n.shards = sm
	n.mu.Unlock()
	if err := sm.Start(ctx, fresh); err != nil {
		sm.Shutdown()
		return err
	}
	return nil
}

// startLoops starts the node's named loops on its open shards, each until
// ctx ends: the shard manager's (shards.Manager.Run) and its reconnection
// of dropped members (shards.Reconnect), the mesh view (watchMesh), the
// trust room's (trust.Trust.Run) and, on a training node, the worker
// (runWorker, which starts the evaluation). The built-in worker is built
// first: an error starts none.
func (n *Node) startLoops(ctx context.Context, spec job.Spec) error {
	var w *worker.Worker
	external := n.cfg.externalTrainer() && spec.External()
	if !external && n.cfg.Train && n.cfg.Trainer == TrainerBuiltin {
		var err error
		if w, err = n.newWorker(spec); err != nil {
			return err
		}
		n.mu.Lock()
		n.worker = w
		n.mu.Unlock()
	}
	n.wg.Go(func() { n.shards.Run(ctx) })
	n.wg.Go(func() { shards.Reconnect(ctx, n.members, n.id, n.now, n.log) })
	n.wg.Go(func() { n.watchMesh(ctx) })
	n.wg.Go(func() { n.trust.Run(ctx) })
	switch {
	case external:
		n.extDone = make(chan struct{})
		n.wg.Go(func() {
			defer close(n.extDone)
			n.runWorker(ctx, spec, nil)
		})
	case w != nil:
		n.wg.Go(func() { n.runWorker(ctx, spec, w) })
	}
	return nil
}

// runWorker trains until ctx ends: once placement allows (large slices
// only: node/shards/trainstart.go) it starts the evaluation loop and runs
// the built-in worker w, or with w nil the worker of each trainer that
// attaches (runExternal). It runs w even when ctx ended meanwhile: w
// returns at once and closes the done channel its Leave waits for.
func (n *Node) runWorker(ctx context.Context, spec job.Spec, w *worker.Worker) {
	n.shards.WaitForPlacement(ctx, func() []records.ShardStatus { return n.Status().Shards })
	n.wg.Go(func() { n.runEvaluation(ctx, w) })
	if w == nil {
		n.runExternal(ctx, spec)
		return
	}
	w.Run(ctx)
}

// runEvaluation evaluates the mesh's parameters every EvalEvery while this
// node is the evaluator (node/eval's loop), on the built-in model (the
// worker w lending its θ for a large one) or, with w nil, through the
// attached trainer; each result is held and sent to every member.
func (n *Node) runEvaluation(ctx context.Context, w *worker.Worker) {
	e := eval.Evaluation{Every: n.cfg.EvalEvery, AuditFraction: n.cfg.AuditFraction, DataDir: n.dir.Path, Seconds: n.metrics.EvalSeconds, Count: n.metrics.Evals,
		Done: func(ctx context.Context, e records.EvalResult) { n.claims.Set(e); n.broadcastEval(ctx, e) }}
	if w == nil {
		e.Evaluate = n.evaluateExternal
	} else {
		e.Worker = w
		e.Evaluate = func(_ context.Context, theta []float32) (cudaops.Eval, error) {
			return n.evalModel.Evaluate(theta, n.test)
		}
	}
	n.snaps.Run(ctx, e)
}

// leave ends the node's part in the mesh once ctx ended: the loops
// stopped (stop), the worker removed from every shard it can reach (or the
// trainer told to stop and its worker gone), leadership handed off, the
// gossip mesh left, and the replicas shut down.
func (n *Node) leave(stop context.CancelFunc) {
	n.setPhase("leaving")
	n.log.Info("leaving")
	stop()
	if n.extDone != nil {
		<-n.extDone // the trainer told to stop, its worker gone from the shards
	} else if n.worker != nil {
		n.worker.Leave(n.cfg.LeaveTimeout)
	}
	n.shards.HandOff()
	if err := n.members.Leave(n.cfg.LeaveTimeout); err != nil {
		n.log.Warn("leave", "err", err)
	}
	n.shards.Shutdown()
}

// joinAndAdoptSpec joins the mesh (or bootstraps it) and settles the job
// spec. fresh is true when this node bootstraps a new mesh; persist is true
// when the data dir has no spec yet: Run writes it once the start has gone
// far enough that a retry must keep it (see Run).
func (n *Node) joinAndAdoptSpec(ctx context.Context, explicit func(string) bool) (fresh, persist bool, err error) {
	persisted, hasSpec, err := n.dir.Spec()
	if err != nil {
		return false, false, err
	}
	seeds, onlySelf := join.Resolve(ctx, n.cfg.Join, n.cfg.isSelf, net.DefaultResolver.LookupHost)
	fromFlag := true
	if onlySelf {
		n.log.Info("--join names only this node: starting as the mesh's first node", "join", n.cfg.Join)
	}
	if len(seeds) == 0 {
		seeds, fromFlag = n.dir.Peers(), false
	}
	joined := false
	if len(seeds) > 0 {
		timeout := n.cfg.JoinTimeout
		if !fromFlag {
			timeout = min(timeout, 10*time.Second)
		}
		j := &join.Join{Seeds: seeds, Timeout: timeout, Flag: fromFlag, GossipPort: DefaultConfig().GossipPort, Log: n.log, After: time.After, AnswersHTTP: join.AnswersHTTP}
		err := j.Run(ctx, n.members.Join)
		switch {
		case err == nil:
			joined = true
		case fromFlag || ctx.Err() != nil:
			return false, false, err
		case !hasSpec:
			return false, false, fmt.Errorf("no persisted peer answered and the data dir has no job spec: start with --join or a fresh --data-dir")
		default:
			n.log.Warn("no persisted peer answered; continuing alone", "peers", seeds)
		}
	}
	if !joined {
		spec := n.cfg.Spec
		if hasSpec {
			if err := n.cfg.Spec.CheckAdopt(persisted, explicit); err != nil {
				return false, false, fmt.Errorf("data dir %s: %w", n.dir.Path, err)
			}
			spec = persisted
		} else if spec = spec.WithJobDataset(explicit); !spec.External() || spec.Layout != "" {
			if spec, err = job.ResolveShards(spec); err != nil {
				return false, false, err
			}
		} // else: a new external job resolves its shards with its layout (awaitLayout)
		n.setSpec(spec)
		return !hasSpec, !hasSpec, nil
	}
	if hasSpec {
		// Serve the persisted spec while asking for the mesh's: when the
		// whole mesh restarts at once every node is joining, and if none
		// answered before it had adopted a spec, none ever would.
		n.setSpec(persisted)
	}
	sctx, cancel := context.WithTimeout(ctx, n.cfg.JoinTimeout)
	meshSpec, err := n.fetchSpec(sctx)
	cancel()
	if err != nil {
		return false, false, err
	}
	if err := n.cfg.Spec.CheckAdopt(meshSpec, explicit); err != nil {
		return false, false, err
	}
	if hasSpec && persisted != meshSpec {
		return false, false, fmt.Errorf("data dir %s holds another job's spec (%s %s) than the mesh's (%s %s); use a fresh --data-dir",
			n.dir.Path, persisted.Model, persisted.PolicyText(), meshSpec.Model, meshSpec.PolicyText())
	}
	if err := n.dir.SetSpec(meshSpec); err != nil {
		return false, false, err
	}
	n.setSpec(meshSpec)
	return false, false, nil
}

func (n *Node) loadCompute(spec job.Spec) error {
	if spec.External() {
		l, err := spec.ParsedLayout()
		if err != nil {
			return err
		}
		if l == nil {
			return fmt.Errorf("job spec: --model %s without a layout", job.ExternalModel)
		}
		if n.cfg.Train && n.cfg.Trainer != TrainerExternal {
			return fmt.Errorf("the job's model is %s (a trainer process computes): start this node with --trainer %s, or --train=false to host shards only",
				job.ExternalModel, TrainerExternal)
		}
		n.layout = l
		n.memLimit = memlimit.Apply(n.cfg.MemoryLimit, 4*int64(l.Total()), 0, spec.Shards, spec.Precision(), memlimit.Rounds{Outer: spec.Outer().Nesterov()})
		return nil
	}
	be, err := cudaops.NewBackend(n.cfg.Backend)
	if err != nil {
		return err
	}
	if n.model, err = cudaops.NewModel(spec.Model, cudaops.ModelOptions{Backend: be, Workers: n.cfg.Threads}); err != nil {
		return err
	}
	n.layout = n.model.Layout()
	modelBytes := 4 * int64(n.model.NumParams())
	if !n.cfg.Train || n.cfg.externalTrainer() {
		n.memLimit = memlimit.Apply(n.cfg.MemoryLimit, modelBytes, 0, spec.Shards, spec.Precision(), memlimit.Rounds{Outer: spec.Outer().Nesterov()})
		return nil
	}
	// Evaluation gets its own model: a Model runs one call at a time, so
	// sharing the worker's would stall its gradients for a whole pass over
	// the test set, and one thread keeps it from taking every core.
	if n.evalModel, err = cudaops.NewModel(spec.Model, cudaops.ModelOptions{Backend: be, Workers: 1}); err != nil {
		return err
	}
	train, test, err := cudaops.LoadDataset(spec.Dataset, n.cfg.DataPath)
	if err != nil {
		return fmt.Errorf("dataset %s: %w", spec.Dataset, err)
	}
	n.train, n.test = train, test
	n.memLimit = memlimit.Apply(n.cfg.MemoryLimit, modelBytes, int64(train.Bytes()+test.Bytes()), spec.Shards, spec.Precision(),
		memlimit.Rounds{Steps: spec.Rounds(), Outer: spec.Outer().Nesterov()})
	if n.memLimit > 0 {
		n.log.Info("node: soft memory limit set", "mib", n.memLimit>>20, "model_mib", modelBytes>>20)
	}
	if n.cfg.EvalSamples > 0 && n.cfg.EvalSamples < test.Len() {
		n.test = test.Subset(n.cfg.EvalSamples)
	}
	return nil
}

// newShards builds the shard manager room for spec.
func (n *Node) newShards(spec job.Spec) *shards.Manager {
	return shards.New(shards.Deps{ID: n.id, Replicas: n.replicas, Members: n.members, Observer: n.obs, Event: n.events.Add,
		ApplySeconds: n.metrics.RaftApplySeconds, Diverged: n.metrics.ReplicasDiverged, SetPeers: n.dir.SetPeers, Logger: n.log,
		PeerShards: func(own []records.ShardStatus) []records.ShardStatus {
			s := status.Status{Shards: own, Now: n.now()}
			n.view.Fill(&s)
			return s.Shards
		},
		PeerLeader: n.view.Leader,
		RTT:        n.rttBetween,
		Theta: func() []float32 {
			if n.initTheta != nil {
				return n.initTheta
			}
			if n.model == nil { // an external job: θ₀ came with its layout
				return make([]float32, n.layout.Total())
			}
			return n.model.Init(spec.Seed)
		},
	}, shards.Config{NumParams: n.layout.Total(), Shards: spec.Shards, Replication: spec.Replication,
		Spec: shardapi.Spec{Policy: spec.PolicyText(), Optimizer: spec.ShardOptimizer(), OutlierFactor: spec.OutlierFactor,
			BalanceBase: spec.BalanceBase(), BalanceStep: spec.BalanceStep(), Batch: spec.RoundSamples(), Precision: spec.Precision(), Pipeline: spec.Pipeline,
			Outer: spec.Outer()}})
}

// evalJob is what a model read needs of the job; false until the node
// has joined the mesh's shards.
func (n *Node) evalJob() (eval.Job, bool) {
	n.mu.RLock()
	shards, spec := n.shards, n.spec
	n.mu.RUnlock()
	if shards == nil || spec == nil {
		return eval.Job{}, false
	}
	b, _ := json.Marshal(spec)
	return eval.Job{Layout: n.layout, Bounds: shards.Bounds(), Candidates: shards.Candidates, Name: spec.Model, Dataset: spec.Dataset, Spec: b}, true
}
