package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node/job"
	"dsspmesh/node/records"
	"dsspmesh/node/status"
)

// ControlShard is the shard id of the node-to-node control channel
// (mesh.Channel{KindRPC, ControlShard}); real shards are numbered from 0 and
// never reach it.
const ControlShard = math.MaxUint32

var controlChannel = mesh.Channel{Kind: mesh.KindRPC, Shard: ControlShard}

// Control frames: a msgpack header, no payload. A request names its op; the
// reply carries the answer.
//
//	op "spec": reply Spec = the JSON job spec ("" if the node has none yet)
//	op "eval": request Eval = a JSON EvalResult; reply empty
//	op "view": reply payload = the JSON status.PeerView of the answering node
//	op "evaluated": the answer is the evaluated model file in frames of
//	  node/eval's (forward.go: eval.Room.SendEvaluated), and the stream ends
//	op "revoke": request ID = a node id, MAC = the operator's MAC of it
//	  (mesh.MeshKey.OperatorMAC(trust.RevokeOp, ID)); the receiver checks the
//	  MAC itself, so a member relays a revocation but cannot make one;
//	  reply empty
type controlMsg struct {
	Op   string `msgpack:"op"`
	Spec []byte `msgpack:"spec,omitempty"`
	Eval []byte `msgpack:"eval,omitempty"`
	Err  string `msgpack:"err,omitempty"`
	ID   string `msgpack:"id,omitempty"`
	MAC  []byte `msgpack:"mac,omitempty"`
}

// serveControl answers control streams until ctx ends. Input from a peer
// never panics: a bad frame closes that stream only.
func (n *Node) serveControl(ctx context.Context, ln mesh.Listener) {
	for {
		s, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		n.wg.Go(func() {
			defer s.Close()
			for {
				s.SetReadDeadline(time.Now().Add(time.Minute))
				var req controlMsg
				if _, err := s.RecvFrame(&req); err != nil {
					return
				}
				if req.Op == "evaluated" {
					if err := n.snaps.SendEvaluated(s); err != nil {
						n.log.Debug("evaluated model to a peer cut short", "peer", s.Peer(), "err", err)
					}
					return
				}
				var rep controlMsg
				var payload []byte
				switch req.Op {
				case "spec":
					if spec := n.jobSpec(); spec != nil && (!spec.External() || spec.Layout != "") {
						rep.Spec, _ = json.Marshal(spec)
					}
				case "eval":
					var e records.EvalResult
					if err := json.Unmarshal(req.Eval, &e); err != nil {
						rep.Err = "bad eval"
					} else if err := n.claims.Receive(ctx, s.Peer(), e); err != nil {
						rep.Err = err.Error()
					}
				case "view":
					payload, _ = status.MarshalFinite(n.localView())
				case "revoke":
					if err := n.trust.Take(mesh.NodeID(req.ID), req.MAC, string(s.Peer())); err != nil {
						rep.Err = err.Error()
					}
				default:
					rep.Err = fmt.Sprintf("unknown op %q", req.Op)
				}
				s.SetWriteDeadline(time.Now().Add(10 * time.Second))
				if err := s.SendFrame(rep, payload); err != nil {
					return
				}
			}
		})
	}
}

func (n *Node) controlCall(ctx context.Context, m mesh.Member, req controlMsg) (controlMsg, error) {
	rep, _, err := n.controlCallPayload(ctx, m, req)
	return rep, err
}

// controlCallPayload is controlCall for ops whose answer is a payload.
func (n *Node) controlCallPayload(ctx context.Context, m mesh.Member, req controlMsg) (controlMsg, []byte, error) {
	s, err := n.tr.Dial(ctx, m.ID, m.QUICAddr, controlChannel)
	if err != nil {
		return controlMsg{}, nil, err
	}
	defer s.Close()
	if d, ok := ctx.Deadline(); ok {
		s.SetDeadline(d)
	}
	if err := s.SendFrame(req, nil); err != nil {
		return controlMsg{}, nil, err
	}
	var rep controlMsg
	payload, err := s.RecvFrame(&rep)
	if err != nil {
		return controlMsg{}, nil, err
	}
	if rep.Err != "" {
		return rep, nil, errors.New(rep.Err)
	}
	return rep, payload, nil
}

// askControl opens a control stream to m and sends it op's request; the
// answer is the caller's to read (eval.Deps.AskControl).
func (n *Node) askControl(ctx context.Context, m mesh.Member, op string) (mesh.Stream, error) {
	s, err := n.tr.Dial(ctx, m.ID, m.QUICAddr, controlChannel)
	if err != nil {
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		s.SetDeadline(d)
	}
	if err := s.SendFrame(controlMsg{Op: op}, nil); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// fetchSpec asks the other members for the job spec until one has it.
func (n *Node) fetchSpec(ctx context.Context) (job.Spec, error) {
	var last error = errors.New("no other member yet")
	for {
		for _, m := range n.members.Members() {
			if m.ID == n.id {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			rep, err := n.controlCall(cctx, m, controlMsg{Op: "spec"})
			cancel()
			if err != nil {
				last = fmt.Errorf("%s: %w", m.ID, err)
				continue
			}
			if len(rep.Spec) == 0 {
				last = fmt.Errorf("%s has no job spec yet", m.ID)
				continue
			}
			spec, err := job.Unmarshal(rep.Spec)
			if err != nil {
				last = fmt.Errorf("%s: %w", m.ID, err)
				continue
			}
			return spec, nil
		}
		select {
		case <-ctx.Done():
			return job.Spec{}, fmt.Errorf("no member gave the job spec (last: %v)", last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// broadcastEval sends e to every other member, best effort: a member that
// misses one gets the next.
func (n *Node) broadcastEval(ctx context.Context, e records.EvalResult) {
	b, err := status.MarshalFinite(e)
	if err != nil {
		return
	}
	for _, m := range n.members.Members() {
		if m.ID == n.id {
			continue
		}
		n.wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			if _, err := n.controlCall(cctx, m, controlMsg{Op: "eval", Eval: b}); err != nil {
				n.log.Debug("eval broadcast failed", "peer", m.ID, "err", err)
			}
		})
	}
}

// localView is this node's answer to op "view": every second each node
// asks other members for their view (node/status/meshview.go) and merges
// the answers into its status.
func (n *Node) localView() status.PeerView {
	n.mu.RLock()
	shards, w := n.shards, n.worker
	n.mu.RUnlock()
	v := status.PeerView{HTTP: n.httpAddr}
	if shards != nil {
		all, workers := shards.Status()
		n.view.JudgeQuorum(n.id, mesh.LiveIDs(n.members.Members()), n.now(), all)
		for _, sh := range all {
			if sh.Local != "" {
				v.Shards = append(v.Shards, sh)
			}
		}
		v.Workers = workers
	}
	if w != nil {
		v.Worker = w.Status()
	}
	v.Revocations = n.trust.Revocations()
	for _, m := range n.members.Members() {
		if r, ok := n.peerRTT(m.ID); ok && m.ID != n.id {
			if v.RTT == nil {
				v.RTT = map[string]float64{}
			}
			v.RTT[string(m.ID)] = r
		}
	}
	return v
}

// peerRTT is this node's least measured round trip to peer in
// milliseconds (mesh.RTTReporter), rounded to the microsecond; false
// before a connection measured it or on a transport that does not.
func (n *Node) peerRTT(peer mesh.NodeID) (float64, bool) {
	rr, ok := n.tr.(mesh.RTTReporter)
	if !ok {
		return 0, false
	}
	r, ok := rr.PeerRTT(peer)
	return float64(r.Min.Microseconds()) / 1000, ok
}

// rttBetween is the round trip between members a and b: this node's own
// measurement when it is one of them, else what a or b reported in the
// mesh view.
func (n *Node) rttBetween(a, b mesh.NodeID) (time.Duration, bool) {
	switch {
	case a == b:
		return 0, true
	case a == n.id || b == n.id:
		other := a
		if a == n.id {
			other = b
		}
		ms, ok := n.peerRTT(other)
		return time.Duration(ms * float64(time.Millisecond)), ok
	}
	return n.view.RTT(a, b)
}
