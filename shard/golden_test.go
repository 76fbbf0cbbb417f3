package shard

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"dsspmesh/clock"
	"dsspmesh/internal/golden"
	"dsspmesh/shardapi"
)

// Golden transcripts (internal/golden; testdata/golden/*.txt): go test
// ./shard -run Golden replays them, -rewrite writes what the code
// produces.

// TestGoldenFSM replays the FSM transcripts: entries in (the same bytes a
// leader proposes), the Applied and the state out, with the state hash
// that pins every bit of it.
//
// Commands: init key=value… (shard, len, policy, opt sgd|momentum:μ, lr,
// base, batch, pipeline, outer sgd:LR|nesterov:LR:μ, theta v,v,…); add W
// FROM; remove W; suspend W CLOCK; revoke ID [MAC]; pin ID SEED; push
// W:ITER:SAMPLES[:COMPUTE_NS]=v,v,… … (one entry, pushes in order, a
// receipt time of 100 a push); group W:ITER:SAMPLES … sum=v,v,… [then
// push…] (a summed group, in the shard's sums precision); junk HEX;
// reply W ITER (the leader's reply decision and shard 0's assignments);
// snapshot (restore a copy and compare its hash); state. The FSM is
// replica "a", digesting its state every 4 entries: check AT VOTERS
// ID=LABEL… [own=ID,…] and evict ID AT are agreement entries (as in
// TestGoldenMachines; the label "mine" is this replica's own digest of
// AT); damaged INDEX is its log store finding its copy of an entry damaged.
func TestGoldenFSM(t *testing.T) {
	for _, path := range golden.Files(t, filepath.Join("testdata", "golden"), "fsm_") {
		t.Run(filepath.Base(path), func(t *testing.T) {
			g := &goldenFSM{t: t, f: NewFSM(1, nil)}
			g.f.chk.self, g.f.chk.every = "a", 4
			golden.Run(t, path, g.do)
		})
	}
}

type goldenFSM struct {
	t     *testing.T
	f     *FSM
	index uint64
	recv  int64
	spec  shardapi.Spec
}

func (g *goldenFSM) do(cmd string, args []string) string {
	var data []byte
	var err error
	switch cmd {
	case "init":
		spec, theta := g.parseInit(args)
		g.spec = spec
		g.f.st.shard = spec.Shard
		data, err = encodeInit(spec, theta)
	case "add":
		data, err = encodeWorker(entryAddWorker, clock.WorkerID(args[0]), g.atoi(args[1]))
	case "remove":
		data, err = encodeWorker(entryRemoveWorker, clock.WorkerID(args[0]), 0)
	case "suspend":
		data, err = encodeSuspend(clock.WorkerID(args[0]), g.atoi(args[1]))
	case "revoke":
		h := identityHeader{Op: "revoke", ID: args[0]}
		if len(args) > 1 {
			h.MAC = []byte(args[1])
		}
		data, err = encodeIdentity(h)
	case "pin":
		seed := make([]byte, ed25519.SeedSize)
		copy(seed, args[1])
		data, err = encodeIdentity(identityHeader{Op: "pin", ID: args[0], Key: ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)})
	case "push":
		data, err = encodeGroup(nil, nil, g.parsePushes(args))
	case "group":
		var group, rest []Push
		var sum []byte
		for i, a := range args {
			if v, ok := strings.CutPrefix(a, "sum="); ok {
				sum = g.spec.Precision.Sums().Append(nil, g.floats(v))
				if r := args[i+1:]; len(r) > 0 && r[0] == "push" {
					rest = g.parsePushes(r[1:])
				}
				break
			}
			group = append(group, g.parsePushes([]string{a})...)
		}
		data, err = encodeGroup(group, sum, rest)
	case "junk":
		data, err = hex.DecodeString(args[0])
	case "check", "evict":
		h := parseAgree(g.t, cmd, args)
		for i, a := range args[2:] {
			if strings.HasSuffix(a, "=mine") && cmd == "check" {
				d, _ := g.f.check().digest(h.At)
				h.Digests[i] = d[:]
			}
		}
		data, err = encodeAgree(h)
	case "damaged":
		g.f.Damaged(uint64(g.atoi(args[0])), errors.New("checksum 01020304, the entry's bytes give 05060708"))
		return g.state()
	case "reply":
		return g.reply(clock.WorkerID(args[0]), g.atoi(args[1]))
	case "snapshot":
		b := snapshotBytes(g.t, g.f)
		r := restored(g.t, b)
		return fmt.Sprintf("snapshot of %d bytes restores to the same hash: %v", len(b), r.StateHash() == g.f.StateHash())
	case "state":
		return g.state()
	default:
		g.t.Fatalf("unknown command %q", cmd)
	}
	if err != nil {
		g.t.Fatal(err)
	}
	g.index++
	a := g.f.Apply(&raft.Log{Index: g.index, Type: raft.LogCommand, Data: data}).(shardapi.Applied)
	return appliedText(a) + "\n" + g.state()
}

func (g *goldenFSM) atoi(s string) int64 {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		g.t.Fatal(err)
	}
	return v
}

func (g *goldenFSM) floats(s string) []float32 {
	var v []float32
	for _, x := range strings.Split(s, ",") {
		f, err := strconv.ParseFloat(x, 32)
		if err != nil {
			g.t.Fatal(err)
		}
		v = append(v, float32(f))
	}
	return v
}

func (g *goldenFSM) parseInit(args []string) (shardapi.Spec, []float32) {
	spec := shardapi.Spec{Shard: 1, Optimizer: shardapi.DefaultOptimizer()}
	var theta []float32
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "shard":
			spec.Shard = uint32(g.atoi(v))
		case "policy":
			spec.Policy = v
		case "opt":
			if m, ok := strings.CutPrefix(v, "momentum:"); ok {
				spec.Optimizer.Kind, spec.Optimizer.Momentum = shardapi.Momentum, float64(g.floats(m)[0])
			} else {
				spec.Optimizer.Kind, spec.Optimizer.Momentum = shardapi.SGD, 0
			}
		case "lr":
			spec.Optimizer.Schedule.LR = float64(g.floats(v)[0])
		case "base":
			spec.BalanceBase = g.atoi(v)
		case "step":
			spec.BalanceStep = g.atoi(v)
		case "batch":
			spec.Batch = g.atoi(v)
		case "pipeline":
			spec.Pipeline = true
		case "outer":
			f := strings.Split(v, ":")
			spec.Outer.Kind = map[string]shardapi.OuterKind{"sgd": shardapi.OuterSGD, "nesterov": shardapi.OuterNesterov}[f[0]]
			spec.Outer.LR = float64(g.floats(f[1])[0])
			if len(f) > 2 {
				spec.Outer.Momentum = float64(g.floats(f[2])[0])
			}
		case "theta":
			theta = g.floats(v)
		default:
			g.t.Fatalf("init: unknown %q", k)
		}
	}
	spec.Len = len(theta)
	return spec, theta
}

// parsePushes reads W:ITER:SAMPLES[:COMPUTE]=v,v,… (no gradient: a push
// of a summed group).
func (g *goldenFSM) parsePushes(args []string) []Push {
	var ps []Push
	for _, a := range args {
		id, grad, _ := strings.Cut(a, "=")
		f := strings.Split(id, ":")
		m := meta(clock.WorkerID(f[0]), g.atoi(f[1]), g.atoi(f[2]))
		if len(f) > 3 {
			m.ComputeNs = g.atoi(f[3])
		}
		g.recv += 100
		p := Push{PushMeta: m, RecvNanos: g.recv}
		if grad != "" {
			p.Grad = g.spec.Precision.Append(nil, g.floats(grad))
		}
		ps = append(ps, p)
	}
	return ps
}

func (g *goldenFSM) reply(w clock.WorkerID, iter int64) string {
	st, _, ver := g.f.replyFor(w, iter, false)
	names := map[replyState]string{replyOK: "ok", replyHeld: "held", replyPending: "pending", replyUnknown: "unknown"}
	s := fmt.Sprintf("reply %s index=%d t_min=%d", names[st], ver.Index, ver.Min)
	next, ahead := g.f.assignments(w, iter)
	for _, a := range []*shardapi.Assignment{next, ahead} {
		if a != nil {
			s += fmt.Sprintf("\nassign iter=%d version=%d batch=%d pos=%d global=%d predict=%d", a.Iter, a.Version, a.Batch, a.Pos, a.Global, a.PredictNs)
		}
	}
	return s
}

// appliedText is an Applied in one line a push.
func appliedText(a shardapi.Applied) string {
	s := fmt.Sprintf("applied %d %s", a.Index, a.Kind)
	if a.Worker != "" {
		s += " worker=" + string(a.Worker)
	}
	if a.Kind == "add-worker" {
		s += fmt.Sprintf(" clock=%d", a.StartClock)
	}
	if a.Suspected {
		s += " suspected"
	}
	for _, r := range a.Released {
		s += fmt.Sprintf(" released=%s:%d", r.Worker, r.Iter)
	}
	if a.Err != nil {
		s += " err=" + errText(a.Err)
	}
	if a.Diverged != nil {
		s += fmt.Sprintf("\n  diverged at %d: %s", a.Diverged.At, a.Diverged.Reason)
	}
	for _, p := range a.Pushes {
		s += fmt.Sprintf("\n  %s:%d", p.Worker, p.Iter)
		switch {
		case p.Applied:
			s += fmt.Sprintf(" applied released=%v rule=%v gap=%d grant=%d", p.Outcome.Released, p.Outcome.Rule, p.Outcome.Gap, p.Outcome.Grant)
			for _, r := range p.Outcome.Others {
				s += fmt.Sprintf(" releases=%s:%d", r.Worker, r.Iter)
			}
		case p.Duplicate:
			s += " duplicate"
		}
		if p.Err != nil {
			s += " err=" + errText(p.Err)
		}
	}
	return s
}

func errText(err error) string {
	if rej, ok := err.(*shardapi.RejectError); ok {
		return fmt.Sprintf("%s(%s)", rej.Reason, rej.Detail)
	}
	return strconv.Quote(err.Error())
}

// state is the FSM's state in a few lines, ending with its hash.
func (g *goldenFSM) state() string {
	st := g.f.Status()
	var b strings.Builder
	fmt.Fprintf(&b, "state index=%d t_min=%d t_max=%d samples=%d pushes=%d dups=%d", st.AppliedIndex, st.Min, st.Max, st.Samples, st.Pushes, st.Duplicates)
	for _, r := range slices.Sorted(func(yield func(string) bool) {
		for k := range st.Rejected {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, " %s=%d", r, st.Rejected[r])
	}
	if len(st.Workers) > 0 {
		b.WriteString("\n  clocks")
		for _, w := range st.Workers {
			fmt.Fprintf(&b, " %s=%d", w.ID, w.Clock)
			if w.Waiting {
				b.WriteString("(held)")
			}
		}
	}
	if theta := g.f.Params(nil); len(theta) > 0 {
		fmt.Fprintf(&b, "\n  θ %s", floatsText(theta))
	}
	if v, arr := goldenVelocity(g.f); v != nil {
		fmt.Fprintf(&b, "\n  v %s arrivals=%d", floatsText(v), arr)
	}
	if ids := g.f.Identities(); len(ids.Revoked) > 0 || len(ids.Pins) > 0 {
		fmt.Fprintf(&b, "\n  revoked %v pins %d", ids.Revoked, len(ids.Pins))
	}
	if c := g.f.check().status; c.At > 0 || len(c.Named) > 0 {
		fmt.Fprintf(&b, "\n  agreement at %d settled %d matched %d named %v", c.At, c.Settled, c.Matched, c.Named)
	}
	if d := g.f.check().diverged; d != nil {
		fmt.Fprintf(&b, "\n  diverged at %d (damaged %v)", d.At, d.Damaged)
	}
	h := g.f.StateHash()
	fmt.Fprintf(&b, "\n  hash %x", h[:8])
	return b.String()
}

func floatsText(v []float32) string {
	var s []string
	for _, x := range v {
		s = append(s, strconv.FormatFloat(float64(x), 'g', 7, 32))
	}
	return "[" + strings.Join(s, " ") + "]"
}

// goldenVelocity reads the optimizer's velocity (the outer rule's
// momentum) and the outer rule's arrivals.
func goldenVelocity(f *FSM) ([]float32, int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Clone(f.st.params.velocity), f.st.params.arrivals
}
