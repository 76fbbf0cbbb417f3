package assemble

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"syscall"

	"dsspmesh/mesh"
	"dsspmesh/node"
	"dsspmesh/node/datadir"
	"dsspmesh/node/job"
	"dsspmesh/node/status"
	"dsspmesh/raftstore"
)

// Node opens the edges node.Run needs for cfg. The key and the
// --init-from file are read and checked before anything is written to
// disk, so a bad key or model file leaves no data dir or node id behind.
func Node(cfg node.Config, log *slog.Logger) (d node.Deps, err error) {
	if err := cfg.Validate(); err != nil {
		return node.Deps{}, err
	}
	sec, keyPrint, err := security(cfg, log)
	if err != nil {
		return node.Deps{}, err
	}
	initParams, err := job.LoadInitFrom(cfg.Spec)
	if err != nil {
		return node.Deps{}, err
	}
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	dir, err := datadir.Open(cfg.DataDir)
	if err != nil {
		return node.Deps{}, err
	}
	closers = append(closers, dir.Close)
	dir.Key = keyPrint
	if err := dir.CheckKey(); err != nil {
		return node.Deps{}, err
	}
	// One damaged shard store refuses the whole start, before a port is
	// bound or the node joins: a node that ran its other replicas would
	// look healthy to the mesh while one shard silently lost a replica.
	// Each refusal names the file, the problem and the remedy
	// (raftstore.DamagedError).
	if err := raftstore.CheckShards(dir.Path, raftstore.DefaultConfig().OpenTimeout); err != nil {
		return node.Deps{}, fmt.Errorf("--data-dir %s: the node does not start: %w", dir.Path, err)
	}
	// node.New, the transport and the membership name the node in their
	// own records; the replicas' raft records get it here.
	d = node.Deps{Dir: dir, Logger: log, InitParams: initParams, VerifyOperator: sec.VerifyOperator}
	if cfg.HistoryDir != "" {
		h, err := status.OpenHistory(cfg.HistoryDir, dir.ID)
		if err != nil {
			return node.Deps{}, fmt.Errorf("--history-dir %s: %w", cfg.HistoryDir, err)
		}
		closers = append(closers, h.Close)
		d.Observer = h
	}
	if d.HTTP, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return node.Deps{}, bindError("--http-addr", cfg.HTTPAddr, err)
	}
	closers = append(closers, d.HTTP.Close)
	creds, err := sec.NodeWithKey(dir.ID, dir.NodeKey)
	if err != nil {
		return node.Deps{}, err
	}
	tr, err := mesh.NewQUICTransport(mesh.DefaultTransportConfig(cfg.QUICAddr()), creds, log)
	if err != nil {
		return node.Deps{}, bindError("--quic-port", cfg.QUICAddr(), unwrapOp(err))
	}
	closers = append(closers, tr.Close)
	d.Transport = tr

	// Joining until the node has adopted the job's spec (node.Run clears
	// it): placement leaves it out till then.
	meta := mesh.Meta{ID: dir.ID, QUICAddr: tr.Addr(), Trains: cfg.Train, Backend: cfg.Backend, Proto: mesh.ProtocolVersion, Joining: true}
	if cfg.AdvertiseQUIC != "" {
		meta.QUICAddr = cfg.AdvertiseQUIC
	}
	mcfg := mesh.DefaultMembershipConfig(meta, cfg.GossipAddr(), sec)
	mcfg.Advertise = cfg.AdvertiseGossip
	switch cfg.Detection {
	case "fast":
		mcfg.Detection = mesh.FastDetection()
	case "tuned":
		mcfg.Detection = mesh.TunedDetection()
	}
	members, err := mesh.NewMemberlist(mcfg, log)
	if err != nil {
		return node.Deps{}, bindError("--gossip-port", cfg.GossipAddr(), unwrapOp(err))
	}
	d.Membership = members
	d.Replicas = &RaftReplicas{DataDir: dir.Path, Transport: tr, Resolve: mesh.ResolveFromMembership(members), Logger: log.With("node", dir.ID),
		FixedTiming: cfg.RaftTiming == "fixed"}
	return d, nil
}

// security loads the mesh key and returns its fingerprint for the data dir
// ("" under --insecure).
func security(cfg node.Config, log *slog.Logger) (*mesh.Security, string, error) {
	if cfg.Insecure {
		return mesh.InsecureSecurity(log), "", nil
	}
	key, err := mesh.LoadKeyFile(cfg.KeyFile)
	if err != nil {
		return nil, "", fmt.Errorf("--key: %w", err)
	}
	sec, err := mesh.NewSecurity(key)
	return sec, datadir.KeyFingerprint(key), err
}

// bindError names the flag and address of a socket that could not be bound,
// saying plainly when the port is taken.
func bindError(flag, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s %s: address already in use (another dssp node, or another program, holds the port)", flag, addr)
	}
	return fmt.Errorf("%s %s: %v", flag, addr, err)
}

// unwrapOp drops a *net.OpError's wrapping so bind errors read as one
// short line; errors.Is still sees the syscall error.
func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Err
	}
	return err
}
