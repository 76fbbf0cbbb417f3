package shard

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"dsspmesh/clock"
	"dsspmesh/internal/golden"
	"dsspmesh/shardapi"
)

// TestGoldenMachines replays the sub-machines' transcripts
// (testdata/golden/machine_*.txt): each drives sub-machines alone, with no
// FSM and no entry, and shows what they decide and the section each
// writes.
//
// Commands: "job key=value…" (the spec, as TestGoldenFSM's init; it makes
// the machines of that job); params: "workers N" (the gate's N for the
// outer rule), "grad SAMPLES v,v,…" (decode, weigh, check against the
// entry's sum so far, and take it if the step stays in its domain),
// "step" (the entry's step at the tally's rate, then the tally counts it);
// gate: "add W FROM", "push W ITER RECV", "reply W ITER", "suspendable W
// CLK", "remove W" (with the followers told, as state.remove); balance:
// "observe W SAMPLES NS [WANT]" (a push the gate applied, WANT the round
// its link asks for under step=, --local-steps auto), "tick" (with the
// round's steps and global batch under step=), "assign W ITER"; identities: "revoke ID [MAC]", "pin ID SEED", "revoked W";
// agreement: "check AT VOTERS ID=LABEL… [own=ID,…]" (the servers, voters
// first, each with the digest SHA-256(LABEL), or none for "-"), "evict ID
// AT"; claims: "claim BY SEQ LABEL ACC" (digest SHA-256(LABEL), at the
// next index, under the lease the gate names); "section" (the keys every
// machine writes, in order).
func TestGoldenMachines(t *testing.T) {
	for _, path := range golden.Files(t, filepath.Join("testdata", "golden"), "machine_") {
		t.Run(filepath.Base(path), func(t *testing.T) {
			m := &goldenMachines{g: &goldenFSM{t: t}}
			golden.Run(t, path, m.do)
		})
	}
}

type goldenMachines struct {
	g  *goldenFSM // its parsers
	st state
	// the entry being formed: pushes accepted, their samples and arrivals
	accepted         int
	samples, arrived int64
	workers          int
}

func (m *goldenMachines) do(cmd string, args []string) string {
	t, st := m.g.t, &m.st
	switch cmd {
	case "job":
		spec, theta := m.g.parseInit(args)
		m.g.spec = spec
		*st = state{shard: spec.Shard} // a new job: new machines
		m.accepted, m.samples, m.arrived, m.workers = 0, 0, 0, 0
		if err := st.init(entry{spec: spec, theta: shardapi.FP32.Append(nil, theta)}); err != nil {
			return "refused: " + err.Error()
		}
		return fmt.Sprintf("machines of job: balance %v, velocity %v", st.bal.on(), st.params.velocity != nil)
	case "workers":
		m.workers = int(m.g.atoi(args[0]))
		return ""
	case "grad":
		p := &st.params
		samples := m.g.atoi(args[0])
		g := m.g.spec.Precision.Append(nil, m.g.floats(args[1]))
		if reason, detail := p.decode(g, samples, true); reason != 0 {
			return fmt.Sprintf("refused %s(%s)", reason, detail)
		}
		p.weigh(samples)
		arrival := int64(0)
		if samples > 0 {
			arrival = 1
		}
		lr := p.rate(st.tally.samples)
		if j := p.check(m.accepted == 0, m.arrived+arrival, m.workers, lr); j >= 0 {
			return fmt.Sprintf("refused: parameter %d out of its domain at rate %g", j, lr)
		}
		p.take(m.accepted == 0)
		m.accepted, m.samples, m.arrived = m.accepted+1, m.samples+samples, m.arrived+arrival
		return fmt.Sprintf("taken: sum %s", floatsText(p.sum))
	case "step":
		p := &st.params
		if m.accepted > 0 {
			p.step(p.rate(st.tally.samples), m.arrived, m.workers)
			st.tally.applied(m.accepted, m.samples)
		}
		p.release()
		m.accepted, m.samples, m.arrived = 0, 0, 0
		return fmt.Sprintf("θ %s\nv %s arrivals=%d samples=%d pushes=%d", floatsText(p.theta), floatsText(p.velocity), p.arrivals, st.tally.samples, st.tally.pushes)
	case "add":
		c, rel, err := st.gate.add(clock.WorkerID(args[0]), m.g.atoi(args[1]))
		if err == nil {
			for _, f := range st.followers() {
				f.join(clock.WorkerID(args[0]), st.gate.g)
				f.tick(st.gate.g)
			}
		}
		return fmt.Sprintf("clock %d released %v err %v", c, rel, err)
	case "push":
		q := Push{PushMeta: meta(clock.WorkerID(args[0]), m.g.atoi(args[1]), 1), RecvNanos: m.g.atoi(args[2])}
		out, err := st.gate.push(q)
		if err != nil {
			return fmt.Sprintf("not applied: %s (%v)", gateReason(err), err)
		}
		return fmt.Sprintf("applied released=%v rule=%v gap=%d others=%v", out.Released, out.Rule, out.Gap, out.Others)
	case "reply":
		names := map[replyState]string{replyOK: "ok", replyHeld: "held", replyPending: "pending", replyUnknown: "unknown"}
		return "reply " + names[st.gate.reply(clock.WorkerID(args[0]), m.g.atoi(args[1]))]
	case "suspendable":
		return fmt.Sprintf("suspendable %v", st.gate.suspendable(clock.WorkerID(args[0]), m.g.atoi(args[1])))
	case "remove":
		rel, err := st.remove(clock.WorkerID(args[0]))
		return fmt.Sprintf("released %v err %v", rel, err)
	case "observe":
		pm := shardapi.PushMeta{PushID: shardapi.PushID{Worker: clock.WorkerID(args[0])}, Samples: m.g.atoi(args[1]), ComputeNs: m.g.atoi(args[2])}
		if len(args) > 3 {
			pm.Want = m.g.atoi(args[3])
		}
		st.bal.observe(Push{PushMeta: pm}, st.gate.g)
		return ""
	case "tick":
		st.bal.tick(st.gate.g)
		var vs []string
		for _, v := range st.bal.versions {
			vs = append(vs, fmt.Sprintf("v%d from %d pos %d batches %v", v.Version, v.From, v.Pos, v.Batches))
		}
		out := fmt.Sprintf("t_min %d decided %d versions [%s]", st.gate.g.Min(), st.bal.decided, strings.Join(vs, "; "))
		if st.bal.step > 0 {
			out += fmt.Sprintf("\nround: %d steps, global %d", st.bal.h, st.bal.b.Global())
		}
		return out
	case "assign":
		next, ahead := st.bal.assignments(clock.WorkerID(args[0]), m.g.atoi(args[1]))
		var s []string
		for _, a := range []*shardapi.Assignment{next, ahead} {
			if a != nil {
				s = append(s, fmt.Sprintf("iter=%d version=%d batch=%d pos=%d", a.Iter, a.Version, a.Batch, a.Pos))
			}
		}
		return "assign " + strings.Join(s, "; ")
	case "revoke", "pin":
		h := identityHeader{Op: cmd, ID: args[0]}
		if cmd == "revoke" && len(args) > 1 {
			h.MAC = []byte(args[1])
		}
		if cmd == "pin" {
			seed := make([]byte, ed25519.SeedSize)
			copy(seed, args[1])
			h.Key = ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
		}
		if refused := st.ids.apply(h); refused != "" {
			return "refused: " + refused
		}
		v := st.ids.view()
		return fmt.Sprintf("revoked %v pins %d", v.Revoked, len(v.Pins))
	case "revoked":
		return fmt.Sprintf("revoked %v", st.ids.isRevoked(clock.WorkerID(args[0])))
	case "check", "evict":
		h := parseAgree(t, cmd, args)
		if err := checkAgreeHeader(h); err != nil {
			return "bad entry: " + err.Error()
		}
		v, refused := st.agree.apply(h)
		if refused != "" {
			return "refused: " + refused
		}
		out := agreementText(&st.agree)
		if h.Op == "check" {
			out = fmt.Sprintf("settled %v by %d named %v; %s", v.settled, v.agreed, v.named, out)
		}
		return out
	case "claim":
		// claim BY SEQ LABEL ACC: a claim of digest SHA-256(LABEL), made
		// at the next index, under the lease the gate's state names.
		acc, err := strconv.ParseFloat(args[3], 64)
		if err != nil {
			t.Fatal(err)
		}
		c := shardapi.Claim{By: args[0], Seq: uint64(m.g.atoi(args[1])), Accuracy: acc, Digest: digestOf(args[2])}
		if err := c.Check(); err != nil {
			return "bad entry: " + err.Error()
		}
		st.index++
		if refused := st.claims.apply(c, st.gate.evaluator(), uint64(st.index)); refused != "" {
			return "refused: " + refused
		}
		var recs []string
		for _, r := range st.claims.list() {
			recs = append(recs, fmt.Sprintf("%s seq %d acc %v at %d", r.By, r.Seq, r.Accuracy, r.Index))
		}
		return "claims [" + strings.Join(recs, "; ") + "]"
	case "section":
		var h header
		if err := st.job.save(&h); err != nil {
			t.Fatal(err)
		}
		for _, s := range st.sections() {
			if err := s.save(&h); err != nil {
				t.Fatal(err)
			}
		}
		return "keys " + strings.Join(slices.Clone(h.keys), " ")
	}
	t.Fatalf("unknown command %q", cmd)
	return ""
}

// parseAgree parses a check or an evict command (TestGoldenMachines,
// TestGoldenFSM).
func parseAgree(t *testing.T, cmd string, args []string) agreeHeader {
	atoi := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if cmd == "evict" {
		return agreeHeader{Op: "evict", ID: args[0], At: atoi(args[1])}
	}
	h := agreeHeader{Op: "check", At: atoi(args[0]), Voters: int(atoi(args[1]))}
	for _, a := range args[2:] {
		if own, ok := strings.CutPrefix(a, "own="); ok {
			h.Own = strings.Split(own, ",")
			continue
		}
		id, label, _ := strings.Cut(a, "=")
		h.Servers = append(h.Servers, id)
		var d []byte
		if label != "-" {
			s := sha256.Sum256([]byte(label))
			d = s[:]
		}
		h.Digests = append(h.Digests, d)
	}
	return h
}

// agreementText is the agreement machine's state, digests by the label
// whose SHA-256 they are when one of a few short labels.
func agreementText(a *agreement) string {
	return fmt.Sprintf("at %d digest %s named %v evicted %v", a.at, digestLabel(a.digest), a.named, a.evicted)
}

func digestLabel(d []byte) string {
	if len(d) == 0 {
		return "-"
	}
	for _, l := range []string{"good", "bad", "other", "x", "y", "z"} {
		if s := sha256.Sum256([]byte(l)); string(s[:]) == string(d) {
			return l
		}
	}
	return hex.EncodeToString(d[:4])
}
