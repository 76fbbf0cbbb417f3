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
	"dsspmesh/node/eval"
	"dsspmesh/node/job"
	"dsspmesh/node/join"
	"dsspmesh/node/memlimit"
	"dsspmesh/node/records"
	"dsspmesh/node/shards"
	"dsspmesh/node/status"
	"dsspmesh/shardapi"
)

// Run starts a node on d, serves until ctx ends (SIGTERM/SIGINT in the
// command) and then leaves gracefully. explicit reports whether a flag was
// set by the user (command line, environment or config file): only those
// may conflict with the mesh's job spec. Run owns d (see [Deps]).
func Run(ctx context.Context, cfg Config, explicit func(flag string) bool, d Deps) error {
	defer d.Dir.Close()
	defer d.Membership.Shutdown()
	defer d.Transport.Close()
	if d.HTTP != nil {
		defer d.HTTP.Close()
	}
	now := d.Now
	if now == nil {
		now = time.Now
	}
	obs := d.Observer
	if obs == nil {
		obs = records.NoObserver{}
	}
	if c, ok := obs.(io.Closer); ok {
		defer c.Close() // after the replicas: every return path shuts them down first
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	var err error
	initTheta := d.InitParams
	if initTheta == nil {
		if initTheta, err = LoadInitFrom(cfg.Spec); err != nil {
			return err
		}
	}
	log := d.Logger.With("node", d.Dir.ID)
	ctx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	n := &Node{stopRun: stopRun, cfg: cfg, log: log, id: d.Dir.ID, dir: d.Dir, tr: d.Transport, members: d.Membership,
		replicas: d.Replicas, obs: obs, now: now, started: now(), phase: "starting", events: status.NewEventLog(now).LogTo(log), initTheta: initTheta}
	n.claims = n.newClaims()
	if err := n.startTrust(d); err != nil {
		return err
	}
	n.metrics = NewMetrics(n.Status)
	if cfg.Train {
		n.metrics.RegisterWorker() // a node that does not train exports no dssp_worker_* counters
	}
	ckpt, err := eval.OpenCheckpointer(cfg.CheckpointDir, cfg.CheckpointKeep, cfg.CheckpointEvery)
	if err != nil {
		return err
	}
	n.snaps = eval.New(eval.Deps{ID: n.id, Transport: n.tr, Members: n.members, Job: n.evalJob, Evaluator: n.evaluator, Logger: n.log, Now: n.now,
		AskControl: n.askControl}, ckpt)
	ctlLn, err := n.tr.Listen(controlChannel)
	if err != nil {
		return err
	}
	defer ctlLn.Close()

	var srv *http.Server
	if d.HTTP != nil {
		n.httpAddr = advertisedHTTP(d.HTTP.Addr().String(), n.tr.Addr())
		if w := HTTPExposureWarning(d.HTTP.Addr().String()); w != "" {
			n.log.Warn(w)
		}
		h := eval.WithModel(status.NewHTTPHandler(n.Status, n.metrics), n.snaps.ServeModel)
		h = n.trust.WithRevoke(h)
		// The dashboard's history: sampled from this node's status every
		// second from now on, served at /status/history.
		series := status.NewSeries(status.SeriesEvery, status.SeriesCapacity, status.SeriesMaxWorkers)
		h = status.WithSeries(h, series)
		tick := time.NewTicker(status.SeriesEvery)
		defer tick.Stop()
		seriesCtx, stopSeries := context.WithCancel(context.Background())
		defer stopSeries()
		go series.Run(seriesCtx, tick.C, n.Status)
		if cfg.Pprof {
			h = status.WithPprof(h)
		}
		srv = status.NewServer(h)
		go srv.Serve(d.HTTP)
		defer srv.Close()
	}

	ctlCtx, stopCtl := context.WithCancel(context.Background())
	defer stopCtl()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.serveControl(ctlCtx, ctlLn) }()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.events.FollowMembership(ctlCtx, n.members.Events()) }()

	n.setPhase("joining")
	fresh, persist, err := n.joinAndAdoptSpec(ctx, explicit)
	if err != nil {
		return err
	}
	spec := *n.jobSpec()
	n.log.Info("job", "spec", spec.PolicyText(), "model", spec.Model, "shards", spec.Shards, "replication", spec.Replication, "fresh", fresh)
	if w := spec.ReplicationWarning(); w != "" {
		n.log.Warn(w)
	}

	var fileTensors cudaops.Layout // --init-from's tensors, for the first trainer to order
	if spec.External() && spec.Layout == "" && spec.InitFrom != "" {
		if spec, fileTensors, err = n.layoutFromFile(spec); err != nil {
			return err
		}
	}
	if cfg.externalTrainer() {
		if err := n.startTrainerSocket(ctlCtx, spec, fileTensors); err != nil {
			return err
		}
		defer n.ext.Close("node stopped")
		if !spec.External() {
			n.log.Warn("--trainer external on a job of a built-in model: this node trains nothing, and trainers are refused (not-external)", "model", spec.Model)
		}
	}
	if spec.External() && spec.Layout == "" {
		if spec, err = n.awaitLayout(ctx, spec); err != nil {
			return err
		}
	}
	if err := n.loadCompute(spec); err != nil {
		return err
	}
	// The spec is persisted once the model and the dataset are loaded, before
	// the first Raft state: a start that fails before (a missing --data, a
	// model that cannot be built) leaves no spec to disagree with the retry's
	// flags, and a node killed from here on restarts from its spec.
	if persist {
		if err := n.dir.SetSpec(spec); err != nil {
			return err
		}
	}
	// The mesh key's fingerprint likewise (DataDir.CheckKey); a data dir
	// an older build wrote gets it on this start.
	if wrote, err := n.dir.RecordKey(); err != nil {
		return err
	} else if wrote && !persist {
		n.log.Info("recorded the mesh key's fingerprint in the data dir: a later start with another key is refused", "dir", n.dir.Path)
	}
	// Admitted: the spec is the mesh's and the data dir agrees with it,
	// so placement may count this node (a joiner refused before here never
	// became a replica: mesh.Meta.Joining).
	if me := n.members.LocalNode().Meta; me.Joining {
		me.Joining = false
		if err := n.members.UpdateMeta(me); err != nil {
			return fmt.Errorf("announce that this node joined: %w", err)
		}
	}
	sm := n.newShards(spec)
	n.mu.Lock()
	n.shards = sm
	n.mu.Unlock()
	if err := sm.Start(ctx, fresh); err != nil {
		sm.Shutdown()
		return err
	}
	runCtx, stop := context.WithCancel(context.Background())
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.shards.Run(runCtx) }()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); shards.Reconnect(runCtx, n.members, n.id, n.now, n.log) }()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.watchMesh(runCtx) }()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.trust.Run(runCtx) }()
	if cfg.externalTrainer() && spec.External() {
		n.extDone = make(chan struct{})
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer close(n.extDone)
			n.shards.WaitForPlacement(runCtx, func() []ShardStatus { return n.Status().Shards })
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				n.snaps.Run(runCtx, eval.Evaluation{Every: n.cfg.EvalEvery, Evaluate: n.evaluateExternal, DataDir: n.dir.Path,
					Seconds: n.metrics.EvalSeconds, Count: n.metrics.Evals,
					Done: func(ctx context.Context, e EvalResult) { n.claims.Set(e); n.broadcastEval(ctx, e) }})
			}()
			n.runExternal(runCtx, spec)
		}()
	} else if cfg.Train && cfg.Trainer == TrainerBuiltin {
		w, err := n.newWorker(spec)
		if err != nil {
			stop()
			n.shards.Shutdown()
			return err
		}
		n.mu.Lock()
		n.worker = w
		n.mu.Unlock()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			// Large slices only (node/shards/trainstart.go). run is called even when
			// runCtx ended meanwhile: it returns at once and closes the
			// done channel leave waits for.
			n.shards.WaitForPlacement(runCtx, func() []ShardStatus { return n.Status().Shards })
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				n.snaps.Run(runCtx, eval.Evaluation{Every: n.cfg.EvalEvery, Worker: w, DataDir: n.dir.Path,
					Evaluate: func(_ context.Context, theta []float32) (cudaops.Eval, error) {
						return n.evalModel.Evaluate(theta, n.test)
					},
					Seconds: n.metrics.EvalSeconds, Count: n.metrics.Evals,
					Done: func(ctx context.Context, e EvalResult) { n.claims.Set(e); n.broadcastEval(ctx, e) }})
			}()
			w.Run(runCtx)
		}()
	}
	if cfg.Train {
		n.setPhase("training")
	} else {
		n.setPhase("hosting") // up, hosting its shards, no worker (--train=false)
	}
	n.log.Info("node up", "gossip", n.members.LocalNode().Addr, "quic", n.tr.Addr())

	<-ctx.Done()
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

// ErrRevoked ends Run when the mesh's operator revoked this node.
var ErrRevoked = errors.New("this node is revoked")

// revoked is told by the trust room that this node is revoked: Run stops
// (leaving as it can) and returns an error saying so, which the command
// prints as it exits.
func (n *Node) revoked(why string) {
	n.stopRun(fmt.Errorf("%w: %s; a node the operator revoked cannot rejoin this mesh: run it with a new --data-dir (a new id) once the operator allows it", ErrRevoked, why))
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

func (n *Node) loadCompute(spec JobSpec) error {
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
func (n *Node) newShards(spec JobSpec) *shards.Manager {
	return shards.New(shards.Deps{ID: n.id, Replicas: n.replicas, Members: n.members, Observer: n.obs, Event: n.events.Add,
		ApplySeconds: n.metrics.RaftApplySeconds, Diverged: n.metrics.ReplicasDiverged, SetPeers: n.dir.SetPeers, Logger: n.log,
		PeerShards: func(own []ShardStatus) []ShardStatus {
			s := Status{Shards: own, Now: n.now()}
			n.view.Fill(&s)
			return s.Shards
		},
		PeerLeader: n.view.Leader,
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
			BalanceBase: spec.BalanceBase(), Batch: spec.RoundSamples(), Precision: spec.Precision(), Pipeline: spec.Pipeline,
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
