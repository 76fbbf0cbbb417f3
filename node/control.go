package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"dsspmesh/mesh"
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
type controlMsg struct {
	Op   string `msgpack:"op"`
	Spec []byte `msgpack:"spec,omitempty"`
	Eval []byte `msgpack:"eval,omitempty"`
	Err  string `msgpack:"err,omitempty"`
}

// serveControl answers control streams until ctx ends. Input from a peer
// never panics: a bad frame closes that stream only.
func (n *Node) serveControl(ctx context.Context, ln mesh.Listener) {
	for {
		s, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer s.Close()
			for {
				s.SetReadDeadline(time.Now().Add(time.Minute))
				var req controlMsg
				if _, err := s.RecvFrame(&req); err != nil {
					return
				}
				var rep controlMsg
				switch req.Op {
				case "spec":
					if spec := n.jobSpec(); spec != nil {
						rep.Spec, _ = json.Marshal(spec)
					}
				case "eval":
					var e EvalResult
					if err := json.Unmarshal(req.Eval, &e); err != nil {
						rep.Err = "bad eval"
					} else {
						n.setEval(e)
					}
				default:
					rep.Err = fmt.Sprintf("unknown op %q", req.Op)
				}
				s.SetWriteDeadline(time.Now().Add(10 * time.Second))
				if err := s.SendFrame(rep, nil); err != nil {
					return
				}
			}
		}()
	}
}

func (n *Node) controlCall(ctx context.Context, m mesh.Member, req controlMsg) (controlMsg, error) {
	s, err := n.tr.Dial(ctx, m.ID, m.QUICAddr, controlChannel)
	if err != nil {
		return controlMsg{}, err
	}
	defer s.Close()
	if d, ok := ctx.Deadline(); ok {
		s.SetDeadline(d)
	}
	if err := s.SendFrame(req, nil); err != nil {
		return controlMsg{}, err
	}
	var rep controlMsg
	if _, err := s.RecvFrame(&rep); err != nil {
		return controlMsg{}, err
	}
	if rep.Err != "" {
		return rep, errors.New(rep.Err)
	}
	return rep, nil
}

// fetchSpec asks the other members for the job spec until one has it.
func (n *Node) fetchSpec(ctx context.Context) (JobSpec, error) {
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
			spec, err := UnmarshalSpec(rep.Spec)
			if err != nil {
				last = fmt.Errorf("%s: %w", m.ID, err)
				continue
			}
			return spec, nil
		}
		select {
		case <-ctx.Done():
			return JobSpec{}, fmt.Errorf("no member gave the job spec (last: %v)", last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// broadcastEval sends e to every other member, best effort: a member that
// misses one gets the next.
func (n *Node) broadcastEval(ctx context.Context, e EvalResult) {
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	for _, m := range n.members.Members() {
		if m.ID == n.id {
			continue
		}
		n.wg.Add(1)
		go func(m mesh.Member) {
			defer n.wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			if _, err := n.controlCall(cctx, m, controlMsg{Op: "eval", Eval: b}); err != nil {
				n.log.Debug("eval broadcast failed", "peer", m.ID, "err", err)
			}
		}(m)
	}
}
