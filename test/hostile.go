package test

import (
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/node"
	"dsspmesh/raftstore"
	"dsspmesh/shardapi"
)

// OldBinaryEnv names a dssp binary built before the fixes of issue 37
// (docs/security.md: commit 39e1909). When it is set the hostile-member
// suite runs its mesh on that binary and expects each attack fixed since
// to succeed: a case passes when the attack did what the issue reported
// (the "before" column of the table) and fails when the old build
// resisted it.
const OldBinaryEnv = "DSSP_HOSTILE_OLD_BINARY"

// HostileArgs are the node flags the hostile suite's meshes run with
// (understood by the old binary too): fp32 on the wire, so the member
// client encodes its gradients as plain float32, and evaluations every
// second.
var HostileArgs = []string{"--threads", "1", "--eval-every", "1s", "--eval-samples", "500", "--log-level", "error"}

// HostileSpec is the job of the hostile suite's meshes.
var HostileSpec = []string{"--model", "mlp", "--paradigm", "dssp", "--s-lower", "3", "--r-max", "12", "--wire-precision", "fp32"}

// Hostile is a member client: it holds the mesh key, as every member
// does, and speaks the mesh's own protocols through the project's mesh
// and shardapi packages, under a certificate for its own node id (or,
// with [Hostile.As], one it minted for another id). It is what a member
// that misbehaves can do; each method is one attack of issue 37.
type Hostile struct {
	t   testing.TB
	c   *Cluster
	ID  mesh.NodeID
	sec *mesh.Security
	tr  *mesh.QUICTransport
	log *slog.Logger

	mu sync.Mutex
	ml mesh.Membership // set once Join gossiped it in

	// Key is the client's own node key when its id derives from it
	// ([Hostile.FirstInOrder]); nil otherwise.
	Key ed25519.PrivateKey
	// StayInGate: [Hostile.Push] leaves the client a worker of the shard.
	StayInGate bool
}

// meshSecurity loads c's mesh key and the security built on it: what a
// member holding the key mints its certificates with.
func (c *Cluster) meshSecurity(t testing.TB) (mesh.MeshKey, *mesh.Security) {
	t.Helper()
	key, err := mesh.LoadKeyFile(c.Mesh.Key)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := mesh.NewSecurity(key)
	if err != nil {
		t.Fatal(err)
	}
	return key, sec
}

// NewHostile starts a member client against c's mesh under a
// self-certifying id of its own (derived from a key it generates, as a
// real node's fresh data dir does): a QUIC transport on loopback with a
// certificate from c's mesh key. It is not a gossip member until
// [Hostile.Join].
func NewHostile(t testing.TB, c *Cluster) *Hostile {
	t.Helper()
	priv, err := mesh.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	return newHostileWithKey(t, c, priv)
}

// NewHostileSortingFirst is [NewHostile] under a self-certifying id that
// sorts before every id in ids (a key ground until its id does): what a
// key holder that wants the first place of an order by id can make.
func NewHostileSortingFirst(t testing.TB, c *Cluster, ids []string) *Hostile {
	t.Helper()
	for range 1 << 16 {
		priv, err := mesh.GenerateNodeKey()
		if err != nil {
			t.Fatal(err)
		}
		id := string(mesh.DeriveID(priv.Public().(ed25519.PublicKey)))
		if !slices.ContainsFunc(ids, func(o string) bool { return o <= id }) {
			return newHostileWithKey(t, c, priv)
		}
	}
	t.Fatalf("no key in 65536 whose id sorts before %v", ids)
	return nil
}

func newHostileWithKey(t testing.TB, c *Cluster, priv ed25519.PrivateKey) *Hostile {
	t.Helper()
	_, sec := c.meshSecurity(t)
	h := &Hostile{t: t, c: c, ID: mesh.DeriveID(priv.Public().(ed25519.PublicKey)), sec: sec, log: slog.New(slog.DiscardHandler)}
	creds, err := sec.NodeWithKey(h.ID, priv)
	if err != nil {
		t.Fatal(err)
	}
	h.tr = h.transportOf(creds)
	t.Cleanup(func() {
		h.mu.Lock()
		ml := h.ml
		h.mu.Unlock()
		if ml != nil {
			ml.Leave(time.Second)
			ml.Shutdown()
		}
		h.tr.Close()
	})
	return h
}

// transport is a QUIC transport holding a certificate for id, signed by
// the CA the mesh key derives: for a self-certifying id on a key of the
// client's own (so not the id's: a minted certificate), for a legacy id
// on a fresh key (a certificate not marked lifelong, as builds before
// self-certifying ids made).
func (h *Hostile) transport(id mesh.NodeID) *mesh.QUICTransport {
	h.t.Helper()
	var creds *mesh.NodeCredentials
	var err error
	if id.SelfCertifying() {
		// Another node's self-certifying id, on a key of the client's own:
		// signed by the CA the mesh key derives, as any key holder can.
		var priv ed25519.PrivateKey
		if priv, err = mesh.GenerateNodeKey(); err == nil {
			creds, err = h.sec.IssueUnchecked(id, priv)
		}
	} else {
		creds, err = h.sec.Node(id)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return h.transportOf(creds)
}

func (h *Hostile) transportOf(creds *mesh.NodeCredentials) *mesh.QUICTransport {
	h.t.Helper()
	tr, err := mesh.NewQUICTransport(mesh.DefaultTransportConfig("127.0.0.1:0"), creds, h.log)
	if err != nil {
		h.t.Fatal(err)
	}
	return tr
}

// As is a member client holding a certificate it minted for another
// node's id (the mesh key is the CA key): the impersonation of issue 37's
// item 5. Its transport closes when the test ends.
func (h *Hostile) As(id mesh.NodeID) *Hostile {
	o := &Hostile{t: h.t, c: h.c, ID: id, sec: h.sec, log: h.log, tr: h.transport(id)}
	h.t.Cleanup(func() { o.tr.Close() })
	return o
}

// FirstInOrder is a member client with a self-certifying id of its own
// key (a fresh key pair drawn until its id sorts before every node's:
// the evaluation lease names the lowest id among shard 0's workers).
func (h *Hostile) FirstInOrder() *Hostile {
	h.t.Helper()
	// Before every node, this client and every member gossiped in by an
	// earlier case (one that pushed may still be in a gate).
	least := h.ID
	for id := range h.nodes() {
		if id < least {
			least = id
		}
	}
	for _, st := range h.c.Statuses() {
		if st == nil {
			continue
		}
		for _, m := range st.Members {
			if id := mesh.NodeID(m.ID); id < least {
				least = id
			}
		}
	}
	for range 1 << 18 {
		priv, err := mesh.GenerateNodeKey()
		if err != nil {
			h.t.Fatal(err)
		}
		id := mesh.DeriveID(priv.Public().(ed25519.PublicKey))
		if id >= least {
			continue
		}
		creds, err := h.sec.NodeWithKey(id, priv)
		if err != nil {
			h.t.Fatal(err)
		}
		tr, err := mesh.NewQUICTransport(mesh.DefaultTransportConfig("127.0.0.1:0"), creds, h.log)
		if err != nil {
			h.t.Fatal(err)
		}
		o := &Hostile{t: h.t, c: h.c, ID: id, sec: h.sec, log: h.log, tr: tr, Key: priv}
		h.t.Cleanup(func() {
			o.mu.Lock()
			ml := o.ml
			o.mu.Unlock()
			if ml != nil {
				ml.Leave(time.Second)
				ml.Shutdown()
			}
			o.tr.Close()
		})
		return o
	}
	h.t.Fatalf("no key drawn whose id sorts before %s", least)
	return nil
}

// ServeEvaluated answers the mesh's control streams to the client as
// an evaluator would: op "evaluated" with file in parts and claim (a
// JSON evaluation claim) in the header, any other op with an empty
// reply. It runs until the test ends.
func (h *Hostile) ServeEvaluated(file []byte, claim []byte) {
	h.t.Helper()
	ln, err := h.tr.Listen(mesh.Channel{Kind: mesh.KindRPC, Shard: node.ControlShard})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	type head struct {
		Size  int64  `msgpack:"size"`
		Claim []byte `msgpack:"claim,omitempty"`
	}
	go func() {
		for {
			s, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			go func() {
				defer s.Close()
				for {
					s.SetDeadline(time.Now().Add(time.Minute))
					var req controlMsg
					if _, err := s.RecvFrame(&req); err != nil {
						return
					}
					if req.Op != "evaluated" {
						if s.SendFrame(controlMsg{}, nil) != nil {
							return
						}
						continue
					}
					if s.SendFrame(head{Size: int64(len(file)), Claim: claim}, nil) != nil {
						return
					}
					for b := file; len(b) > 0; {
						k := min(len(b), 1<<20)
						if s.SendFrame(struct{}{}, b[:k]) != nil {
							return
						}
						b = b[k:]
					}
					return
				}
			}()
		}
	}()
}

// Join makes the client a gossip member (not training), as a member that
// evaluates nothing but is in every node's view.
func (h *Hostile) Join() { h.join(false) }

// JoinSayingItTrains is Join with the member's gossip saying it trains,
// which it does not: it runs no worker.
func (h *Hostile) JoinSayingItTrains() { h.join(true) }

func (h *Hostile) join(trains bool) {
	h.t.Helper()
	if err := h.TryJoin(trains); err != nil {
		h.t.Fatalf("hostile member join: %v", err)
	}
}

// TryJoin is Join (saying it trains if trains) returning the join's error,
// for a member the mesh may refuse.
func (h *Hostile) TryJoin(trains bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ml != nil {
		return nil
	}
	meta := mesh.Meta{ID: h.ID, QUICAddr: h.tr.Addr(), Backend: "cpu", Proto: mesh.ProtocolVersion, Trains: trains}
	cfg := mesh.DefaultMembershipConfig(meta, "127.0.0.1:0", h.sec)
	cfg.Detection = mesh.FastDetection()
	ml, err := mesh.NewMemberlist(cfg, h.log)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := ml.Join(ctx, []string{h.c.Mesh.Procs[0].Gossip}); err != nil {
		ml.Shutdown()
		return err
	}
	h.ml = ml
	return nil
}

// nodes maps every live member the cluster reports to its QUIC address.
func (h *Hostile) nodes() map[mesh.NodeID]string {
	out := map[mesh.NodeID]string{}
	for _, s := range h.c.Statuses() {
		if s == nil {
			continue
		}
		out[mesh.NodeID(s.Node)] = s.QUIC
		for _, m := range s.Members {
			out[mesh.NodeID(m.ID)] = m.QUIC
		}
	}
	return out
}

// replicas is shard's replica set as the cluster's nodes place it.
func (h *Hostile) replicas(shard uint32) []mesh.NodeID {
	var out []mesh.NodeID
	for _, s := range h.c.Statuses() {
		if s == nil {
			continue
		}
		for _, sh := range s.Shards {
			if sh.ID != shard {
				continue
			}
			for _, id := range append(sh.Placement, sh.Voters...) {
				if !slices.Contains(out, mesh.NodeID(id)) {
					out = append(out, mesh.NodeID(id))
				}
			}
		}
	}
	return out
}

// Client is a shardapi client of shard under the hostile's id, fp32 on
// the wire (the suite's job), with short timeouts.
func (h *Hostile) Client(shard uint32) *shardapi.Client {
	h.t.Helper()
	addrs := h.nodes()
	cfg := shardapi.DefaultClientConfig(shard, clock.WorkerID(h.ID), func() []mesh.NodeID { return h.replicas(shard) })
	cfg.Deadline = 20 * time.Second
	cfg.Precision = h.precision()
	cl, err := shardapi.NewClient(cfg, h.tr, func(id mesh.NodeID) (string, error) {
		if a, ok := addrs[id]; ok {
			return a, nil
		}
		addrs = h.nodes()
		if a, ok := addrs[id]; ok {
			return a, nil
		}
		return "", fmt.Errorf("hostile: no address of %q: %w", id, mesh.ErrNoRoute)
	}, h.log)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { cl.Close() })
	return cl
}

// precision is the job's wire precision, as the cluster's nodes report
// their spec (fp32 until one does).
func (h *Hostile) precision() shardapi.Precision {
	for _, s := range h.c.Statuses() {
		if s != nil && s.Spec != nil {
			return s.Spec.Precision()
		}
	}
	return shardapi.FP32
}

// Read is shard's parameters, clocks and sample count as its leader
// answers a linearizable read.
func (h *Hostile) Read(shard uint32) (shardapi.Slice, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return h.Client(shard).ReadInto(ctx, nil)
}

// HostilePush is one push an attack sends: its samples, compute time,
// gradient (one value repeated over the shard's slice, or the slice's
// length in zeros), and the iteration relative to the clock the worker
// was given (Iter, added to it) unless AbsIter.
type HostilePush struct {
	Samples, ComputeNs int64
	Value              float32
	Iter               int64
	AbsIter            bool
}

// PushOutcome is what one push of an attack got: nil when the shard took
// it, else its error (a *shardapi.RejectError when refused).
type PushOutcome struct {
	Push HostilePush
	Err  error
}

// Accepted reports whether the shard took the push.
func (o PushOutcome) Accepted() bool { return o.Err == nil }

// Reason is the refusal's reason ("" when accepted or not refused).
func (o PushOutcome) Reason() string {
	var rej *shardapi.RejectError
	if errors.As(o.Err, &rej) {
		return rej.Reason.String()
	}
	return ""
}

// Push adds the hostile as a worker of shard (clock from) and sends
// pushes in order, encoded in the job's wire precision, then removes
// itself (a member that is not gossiped is removed by the leaders anyway):
// the one way a member reaches a shard's FSM. A worker removed before its
// pushes (the leader's sweep of workers that are not members) is added
// again, up to 10 times. The shard's length comes from a read; addErr is
// that read's error or the add-worker's.
func (h *Hostile) Push(shard uint32, from int64, pushes ...HostilePush) (clockGiven int64, addErr error, out []PushOutcome) {
	h.t.Helper()
	sl, err := h.Read(shard)
	if err != nil {
		return 0, fmt.Errorf("hostile: read shard %d: %w", shard, err), nil
	}
	n := len(sl.Params)
	prec := h.precision()
	cl := h.Client(shard)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for range 10 {
		out = out[:0]
		clockGiven, addErr = cl.AddWorker(ctx, from)
		if addErr != nil {
			return clockGiven, addErr, nil
		}
		again := false
		next := clockGiven
		for _, p := range pushes {
			grad := make([]float32, n)
			for i := range grad {
				grad[i] = p.Value
			}
			iter := next + p.Iter
			if p.AbsIter {
				iter = p.Iter
			}
			_, err := cl.Push(ctx, shardapi.Push{Iter: iter, Samples: p.Samples, ComputeNs: p.ComputeNs,
				Payload: prec.Append(nil, grad), Keep: true})
			o := PushOutcome{Push: p, Err: err}
			if o.Reason() == shardapi.ReasonUnknownWorker.String() {
				again = true
				break
			}
			if err == nil {
				next = iter + 1
			}
			out = append(out, o)
		}
		if !again {
			break
		}
	}
	if h.StayInGate {
		return clockGiven, nil, out
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	cl.RemoveWorker(rctx)
	return clockGiven, nil, out
}

// ForgeAppendEntries sends replica to of shard req, an AppendEntries
// whose header it fills, under a certificate minted for as, one of the
// shard's replicas, over raft's own transport on the mesh
// (raftstore.NewMeshTransport): what a key holder can say to a replica as
// another replica. It returns the receiver's answer.
func (h *Hostile) ForgeAppendEntries(shard uint32, as, to mesh.NodeID, req *raft.AppendEntriesRequest) (*raft.AppendEntriesResponse, error) {
	o := h.As(as)
	addrs := h.nodes()
	gt, err := raftstore.NewMeshTransportTimeout(o.tr, shard, func(id mesh.NodeID) (string, error) {
		if a, ok := addrs[id]; ok {
			return a, nil
		}
		return "", fmt.Errorf("hostile: no address of %q: %w", id, mesh.ErrNoRoute)
	}, h.log, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer gt.Close()
	req.RPCHeader = raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(as), Addr: []byte(as)}
	req.Leader = []byte(as)
	var resp raft.AppendEntriesResponse
	if err := gt.AppendEntries(raft.ServerID(to), raft.ServerAddress(to), req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Shard log entries as a shard's leader writes them (shard/entry.go's
// layout: a kind byte, a big-endian u32 header length, the msgpack
// header, the payload), for forged AppendEntries.
const (
	entryPush      = 2
	entryAddWorker = 3
)

func forgedEntry(kind byte, header any, payload []byte) []byte {
	hb, err := msgpack.Marshal(header)
	if err != nil {
		panic(err) // maps of strings and integers always encode
	}
	b := append([]byte{kind}, binary.BigEndian.AppendUint32(nil, uint32(len(hb)))...)
	return append(append(b, hb...), payload...)
}

// ForgedAddWorker is a shard log entry that adds worker w at clock from
// (at least the shard's slowest).
func ForgedAddWorker(w string, from int64) []byte {
	return forgedEntry(entryAddWorker, map[string]any{"w": w, "f": from}, nil)
}

// ForgedPush is a shard log entry of one push by worker w of iteration
// iter, samples samples and the encoded gradient grad.
func ForgedPush(w string, iter, samples int64, grad []byte) []byte {
	p := map[string]any{"w": w, "i": iter, "s": samples, "c": int64(0), "t": time.Now().UnixNano(), "n": len(grad)}
	return forgedEntry(entryPush, map[string]any{"p": []any{p}}, grad)
}

// controlMsg is the control channel's frame header (node/control.go).
type controlMsg struct {
	Op   string `msgpack:"op"`
	Spec []byte `msgpack:"spec,omitempty"`
	Eval []byte `msgpack:"eval,omitempty"`
	Err  string `msgpack:"err,omitempty"`
}

// SendEval sends an evaluation over the control channel to the node id at
// addr and returns the error it answered ("" when taken).
func (h *Hostile) SendEval(to mesh.NodeID, addr string, e map[string]any) (string, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := h.tr.Dial(ctx, to, addr, mesh.Channel{Kind: mesh.KindRPC, Shard: node.ControlShard})
	if err != nil {
		return "", err
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(5 * time.Second))
	if err := s.SendFrame(controlMsg{Op: "eval", Eval: b}, nil); err != nil {
		return "", err
	}
	var rep controlMsg
	if _, err := s.RecvFrame(&rep); err != nil {
		return "", err
	}
	return rep.Err, nil
}

// EvalAll sends e (By set to the hostile's id) to every node of the
// cluster and returns each answer, by node id.
func (h *Hostile) EvalAll(e map[string]any) map[mesh.NodeID]string {
	h.t.Helper()
	e["by"] = string(h.ID)
	out := map[mesh.NodeID]string{}
	for _, s := range h.c.Statuses() {
		if s == nil {
			continue
		}
		msg, err := h.SendEval(mesh.NodeID(s.Node), s.QUIC, e)
		if err != nil {
			msg = "transport: " + err.Error()
		}
		out[mesh.NodeID(s.Node)] = msg
	}
	return out
}

// Garbage opens a stream on ch to node to and writes raw bytes that are
// no frame: it reports whether the node closed the stream within 10 s.
func (h *Hostile) Garbage(to mesh.NodeID, addr string, ch mesh.Channel, b []byte) (closed bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := h.tr.Dial(ctx, to, addr, ch)
	if err != nil {
		return false, err
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := s.Write(b); err != nil {
		return true, nil // reset while writing: closed
	}
	var buf [4096]byte
	for {
		if _, err := s.Read(buf[:]); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return false, nil
			}
			return true, nil
		}
	}
}

// GarbageFrames are the malformed frames issue 15 hardened against: a
// length prefix claiming 2 GiB of header, one claiming 4 GiB of payload,
// a header nested 60 000 deep, and 64 KiB of random bytes.
func GarbageFrames(seed uint64) map[string][]byte {
	prefix := func(h, p uint32) []byte {
		b := binary.BigEndian.AppendUint32(nil, h)
		return binary.BigEndian.AppendUint32(b, p)
	}
	deep := []byte(strings.Repeat("\x91", 60000) + "\xc0") // 60 000 nested one-element arrays
	nested := append(prefix(uint32(len(deep)), 0), deep...)
	r := rand.New(rand.NewPCG(seed, 37))
	random := make([]byte, 64<<10)
	for i := range random {
		random[i] = byte(r.UintN(256))
	}
	return map[string][]byte{
		"2GiB-header":  append(prefix(1<<31, 0), 0x80),
		"4GiB-payload": append(prefix(1, 0xffffffff), 0x80),
		"nested-60000": nested,
		"random-64KiB": random,
	}
}

// SlowReader is an HTTP client that asks for responses and never reads
// them: one TCP connection with a 4 KiB receive buffer on which it sent
// its requests, pipelined.
type SlowReader struct {
	conn *net.TCPConn
}

// NewSlowReader sends GET path n times on one connection to addr and
// reads nothing. On loopback the server's send buffer grows to megabytes
// (tcp_wmem), so a response smaller than that is written whole into it
// and the handler returns; n responses of a ~1 MB model are more than it
// holds, and one handler blocks in its write.
func NewSlowReader(addr, path string, n int) (*SlowReader, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	tc.SetReadBuffer(4096)
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, addr)
	if _, err := tc.Write([]byte(strings.Repeat(req, n))); err != nil {
		tc.Close()
		return nil, err
	}
	return &SlowReader{conn: tc}, nil
}

// ServerState is the state of the server's end of the reader's
// connection, read from /proc/net/tcp (Linux): "ESTABLISHED" while the
// server holds it open; after the server closed it, with its response
// still unsent behind a reader that does not read, "FIN_WAIT1" (or a
// later state, or "gone").
func (s *SlowReader) ServerState() (string, error) {
	st, _, err := s.serverEnd()
	return st, err
}

// Stalled reports whether the server's end of the reader's connection is
// open with bytes queued to send: the server writes a response the
// reader does not read.
func (s *SlowReader) Stalled() bool {
	st, queued, err := s.serverEnd()
	return err == nil && st == "ESTABLISHED" && queued > 0
}

// serverEnd is the state of the server's end and the bytes in its send
// queue (/proc/net/tcp's tx_queue).
func (s *SlowReader) serverEnd() (string, int, error) {
	local := s.conn.LocalAddr().(*net.TCPAddr)
	remote := s.conn.RemoteAddr().(*net.TCPAddr)
	states := map[string]string{"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
		"06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}
	port := func(hexAddr string) int {
		_, p, _ := strings.Cut(hexAddr, ":")
		var n int
		fmt.Sscanf(p, "%X", &n)
		return n
	}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", 0, err
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 5 {
				continue
			}
			// The server's socket: its local port is the node's, its
			// remote port the reader's.
			if port(fs[1]) == remote.Port && port(fs[2]) == local.Port {
				var queued int
				tx, _, _ := strings.Cut(fs[4], ":")
				fmt.Sscanf(tx, "%X", &queued)
				if st, ok := states[fs[3]]; ok {
					return st, queued, nil
				}
				return fs[3], queued, nil
			}
		}
	}
	return "gone", 0, nil
}

// Close closes the reader's connection.
func (s *SlowReader) Close() error { return s.conn.Close() }

// oldBinary is the pre-fix binary the suite runs on, "" for this build.
func oldBinary() string { return os.Getenv(OldBinaryEnv) }
