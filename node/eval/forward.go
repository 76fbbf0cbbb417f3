package eval

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/modelfile"
	"dsspmesh/node/records"
)

// The evaluated model from any node: GET /model.safetensors?evaluated on a
// node that is not the evaluator asks the evaluator over the control
// channel (op "evaluated", [Deps.AskControl]) and writes its answer
// through, never holding the file. The evaluator answers from its own
// evaluated snapshot ([Room.SendEvaluated]) and never forwards.
//
// Frames of the answer (msgpack header, payload):
//
//	first  evaluatedHead{Size, Claim, Missing, Err}, no payload: the
//	       file's length in bytes and the evaluator's claim of it (a JSON
//	       records.EvalResult, its Digest the file's), or Missing (no
//	       evaluated model there: a 404) or Err
//	then   evaluatedPart{}, payload: the file's next bytes, at most
//	       evaluatedChunk a frame, until Size bytes came
//
// The asking node takes the claim as a broadcast one (Deps.Claim; the
// claim's By must be the evaluator it asked and its Digest set), hashes
// the parts as they pass and holds back the last one until the digest
// is the claim's: a file that does not match is cut short, never
// completed, and the node logs both digests at ERROR. The asking node refuses a Size beyond the job's model file (4 bytes a
// parameter plus modelfile.MaxHeaderBytes) and a chunk beyond
// evaluatedChunk before reading it; its ?timeout= (default 30s, at most
// 5 min) bounds the whole transfer. The evaluator bounds each chunk's
// write by evaluatedWriteTimeout and the whole by evaluatedSendTimeout.
const (
	evaluatedChunk        = 1 << 20
	evaluatedWriteTimeout = 10 * time.Second
	evaluatedSendTimeout  = 5 * time.Minute // serve.go's maxExportTimeout
)

type evaluatedHead struct {
	Size    int64  `msgpack:"size"`
	Claim   []byte `msgpack:"claim,omitempty"`
	Missing bool   `msgpack:"missing,omitempty"`
	Err     string `msgpack:"err,omitempty"`
}

type evaluatedPart struct{}

// SendEvaluated answers control op "evaluated" on s (the request frame
// already read): the snapshot this node last evaluated, in the frames
// above. It returns when the file is sent or the stream fails; the caller
// closes s.
func (rm *Room) SendEvaluated(s mesh.Stream) error {
	s.SetWriteDeadline(time.Now().Add(evaluatedSendTimeout))
	var err error
	rm.evaluated.serve(func(snap *Snapshot, file string, claim *records.EvalResult) {
		var cb []byte
		if claim != nil {
			cb, _ = json.Marshal(finiteClaim(*claim))
		}
		switch {
		case snap != nil:
			err = rm.sendSnapshot(s, snap, cb)
		case file != "":
			err = sendFile(s, file, cb)
		default:
			err = s.SendFrame(evaluatedHead{Missing: true,
				Err: fmt.Sprintf("the evaluator %s holds no evaluated model now (the last one is gone while the next evaluation reads the model); ask again", rm.d.ID)}, nil)
		}
	})
	return err
}

// finiteClaim is e with a non-finite loss or accuracy as 0 (JSON has no
// NaN; Diverged says so, and the signature covers them as 0).
func finiteClaim(e records.EvalResult) records.EvalResult {
	if !finite(e.Loss) {
		e.Loss = 0
	}
	if !finite(e.Accuracy) {
		e.Accuracy = 0
	}
	return e
}

func (rm *Room) sendSnapshot(s mesh.Stream, snap *Snapshot, claim []byte) error {
	job, ok := rm.d.Job()
	if !ok {
		return s.SendFrame(evaluatedHead{Err: "the evaluator has not joined the mesh's shards"}, nil)
	}
	layout := job.Layout
	size, err := modelfile.Size(layout, snap.Theta, snap.Meta)
	if err != nil {
		return s.SendFrame(evaluatedHead{Err: err.Error()}, nil)
	}
	if err := s.SendFrame(evaluatedHead{Size: size, Claim: claim}, nil); err != nil {
		return err
	}
	pw := &partWriter{s: s, buf: make([]byte, 0, evaluatedChunk)}
	if err := modelfile.Encode(pw, layout, snap.Theta, snap.Meta); err != nil {
		return err
	}
	return pw.flush()
}

func sendFile(s mesh.Stream, path string, claim []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return s.SendFrame(evaluatedHead{Err: err.Error()}, nil)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return s.SendFrame(evaluatedHead{Err: err.Error()}, nil)
	}
	if err := s.SendFrame(evaluatedHead{Size: st.Size(), Claim: claim}, nil); err != nil {
		return err
	}
	pw := &partWriter{s: s, buf: make([]byte, 0, evaluatedChunk)}
	if _, err := io.CopyN(pw, f, st.Size()); err != nil {
		return err // the asker sees a short file
	}
	return pw.flush()
}

// partWriter sends what is written to it in evaluatedPart frames of
// evaluatedChunk bytes (the last one shorter, at flush).
type partWriter struct {
	s   mesh.Stream
	buf []byte
}

func (p *partWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		k := min(len(b), evaluatedChunk-len(p.buf))
		p.buf = append(p.buf, b[:k]...)
		b, n = b[k:], n+k
		if len(p.buf) == evaluatedChunk {
			if err := p.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (p *partWriter) flush() error {
	if len(p.buf) == 0 {
		return nil
	}
	p.s.SetWriteDeadline(time.Now().Add(evaluatedWriteTimeout))
	err := p.s.SendFrame(evaluatedPart{}, p.buf)
	p.buf = p.buf[:0]
	return err
}

// forwardEvaluated answers GET /model.safetensors?evaluated on a node that
// is not the evaluator with the evaluator's evaluated snapshot, asked over
// the control channel within timeout.
func (rm *Room) forwardEvaluated(w http.ResponseWriter, r *http.Request, evaluator mesh.NodeID, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	a, code, err := rm.askEvaluated(ctx, evaluator)
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	defer a.s.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(a.size, 10))
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Dssp-Evaluator", string(evaluator))
	w.Header().Set(records.DigestHeader, a.claim.Digest)
	bw := bufio.NewWriterSize(rm.stalling(w, a.size), evaluatedChunk)
	got, err := a.copyTo(bw)
	if errors.Is(err, errDigestMismatch) {
		// The last part is held back: the client never has the whole file.
		rm.d.Logger.Error("evaluated model refused: its bytes are not the ones its evaluation claims", "evaluator", evaluator, "seq", a.claim.Seq, "err", err)
		panic(http.ErrAbortHandler)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		// The header is out: all that is left is to say why the body stopped.
		rm.d.Logger.Warn("evaluated model from the evaluator cut short", "evaluator", evaluator, "bytes", got, "of", a.size, "err", err)
	}
}

// evaluatedAnswer is the evaluator's answer to op "evaluated", its size
// and claim judged: s is at the file's first part.
type evaluatedAnswer struct {
	s     mesh.Stream
	size  int64
	claim records.EvalResult
}

// askEvaluated asks evaluator for its evaluated model within ctx and
// judges the head of its answer (takeClaim); the error says why it
// failed, code as an HTTP status. The caller closes a.s.
func (rm *Room) askEvaluated(ctx context.Context, evaluator mesh.NodeID) (_ *evaluatedAnswer, code int, _ error) {
	var member *mesh.Member
	for _, m := range rm.d.Members.Members() {
		if m.ID == evaluator {
			member = &m
			break
		}
	}
	if member == nil {
		return nil, http.StatusServiceUnavailable, fmt.Errorf("node %s: the evaluator %s is not a live member", rm.d.ID, evaluator)
	}
	s, err := rm.d.AskControl(ctx, *member, "evaluated")
	if err != nil {
		return nil, http.StatusBadGateway, fmt.Errorf("node %s: asking the evaluator %s: %v", rm.d.ID, evaluator, err)
	}
	fail := func(code int, err error) (*evaluatedAnswer, int, error) { s.Close(); return nil, code, err }
	if d, ok := ctx.Deadline(); ok {
		s.SetDeadline(d)
	}
	s.SetMaxPayload(evaluatedChunk)
	var head evaluatedHead
	if _, err := s.RecvFrame(&head); err != nil {
		return fail(http.StatusBadGateway, fmt.Errorf("node %s: the evaluator %s's answer: %v", rm.d.ID, evaluator, err))
	}
	switch {
	case head.Missing:
		return fail(http.StatusNotFound, errors.New(head.Err))
	case head.Err != "":
		return fail(http.StatusBadGateway, fmt.Errorf("the evaluator %s: %s", evaluator, head.Err))
	}
	if limit := rm.evaluatedLimit(); head.Size <= 0 || head.Size > limit {
		return fail(http.StatusBadGateway, fmt.Errorf("node %s: the evaluator %s announced a model file of %d bytes (at most %d)", rm.d.ID, evaluator, head.Size, limit))
	}
	claim, err := rm.takeClaim(ctx, evaluator, head.Claim)
	if err != nil {
		log := rm.d.Logger.Warn
		if errors.Is(err, errUnrecorded) {
			log = rm.d.Logger.Error // the evaluator serves what it did not record: an attack, or a bug
		}
		log("evaluated model refused", "evaluator", evaluator, "err", err)
		return fail(http.StatusBadGateway, fmt.Errorf("node %s: the evaluated model of %s refused: %v", rm.d.ID, evaluator, err))
	}
	return &evaluatedAnswer{s: s, size: head.Size, claim: claim}, http.StatusOK, nil
}

// copyTo writes the file's parts to w as they arrive, hashing them, the
// last part held back until the digest is the claim's: on a mismatch (an
// error wrapping errDigestMismatch) w never gets the whole file. got is
// the bytes received.
func (a *evaluatedAnswer) copyTo(w io.Writer) (got int64, err error) {
	check := newDigestCheck(w)
	buf := make([]byte, 0, evaluatedChunk)
	for got < a.size && err == nil {
		err = a.s.RecvFrameTo(&evaluatedPart{}, func(n int, pr io.Reader) error {
			if int64(n) > a.size-got {
				return fmt.Errorf("a part of %d bytes beyond the announced %d", n, a.size)
			}
			buf = buf[:n]
			k, err := io.ReadFull(pr, buf)
			got += int64(k)
			if err != nil {
				return err
			}
			return check.part(buf)
		})
	}
	if err != nil {
		return got, err
	}
	return got, check.finish(a.claim.Digest)
}

// takeClaim judges the claim the evaluator sent with its evaluated
// model: a JSON records.EvalResult by that evaluator, with a digest and
// a valid signature, taken as a broadcast claim is (Deps.Claim), and the
// one shard 0 recorded for its sequence (record.go).
func (rm *Room) takeClaim(ctx context.Context, evaluator mesh.NodeID, b []byte) (records.EvalResult, error) {
	var e records.EvalResult
	if len(b) == 0 {
		return e, errors.New("it came with no evaluation claim (a build before claims carried digests?)")
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("its claim: %w", err)
	}
	switch {
	case e.By != string(evaluator):
		return e, fmt.Errorf("its claim is by %q, not the evaluator %q", e.By, evaluator)
	case len(e.Digest) != 64:
		return e, fmt.Errorf("its claim carries no SHA-256 digest (%q)", e.Digest)
	}
	if err := VerifyClaim(e); err != nil {
		return e, err
	}
	if rm.d.Claim != nil {
		if err := rm.d.Claim(ctx, evaluator, e); err != nil {
			return e, fmt.Errorf("its claim dropped: %w", err)
		}
	}
	if _, err := rm.recorded(ctx, e); err != nil {
		return e, err
	}
	return e, nil
}

// evaluatedLimit bounds the evaluated model file an evaluator may
// announce: the job's model as fp32 and the largest header a model file
// may have; modelfile.MaxFileBytes before the node has joined.
func (rm *Room) evaluatedLimit() int64 {
	job, ok := rm.d.Job()
	if !ok || job.Layout == nil {
		return modelfile.MaxFileBytes
	}
	return 8 + modelfile.MaxHeaderBytes + 4*int64(job.Layout.Total())
}
