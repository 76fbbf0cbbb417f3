package eval

import "sync"

// evaluatedModel holds the snapshot this node last evaluated, for
// GET /model.safetensors?evaluated: in memory (snap), or for a model whose
// evaluation borrows the worker's θ (node/worker/lend.go) in a file of the data dir
// (file, EvaluatedFile), written while θ was lent. The next evaluation
// reads into snap's memory (take), so an evaluator holds one snapshot of
// the model, not two: while that read runs there is none to serve, unless
// an export was streaming it when the evaluation began — then it is left
// whole and the evaluation reads into new memory.
type evaluatedModel struct {
	mu   sync.RWMutex // held for reading while an export streams snap
	snap *Snapshot
	file string // replaced by a rename: an export streaming the old one reads it whole
}

// EvaluatedFile is the evaluated snapshot of a large model, in the data dir.
const EvaluatedFile = "evaluated.safetensors"

// take removes the snapshot and returns its parameters' memory to read
// the next evaluation into; nil when there is none or one is being served.
func (e *evaluatedModel) take() []float32 {
	if !e.mu.TryLock() {
		return nil
	}
	defer e.mu.Unlock()
	if e.snap == nil {
		return nil
	}
	theta := e.snap.Theta
	e.snap = nil
	return theta
}

// set keeps s in memory, or when file is set, says the snapshot is there.
func (e *evaluatedModel) set(s *Snapshot, file string) {
	e.mu.Lock()
	e.snap, e.file = s, file
	e.mu.Unlock()
}

// dropMemory drops a snapshot kept in memory but keeps a file: before an
// evaluation that borrows the worker's θ, memory is what it saves, and
// the file stays whole until the next one replaces it by a rename, so
// ?evaluated answers all through the evaluation.
func (e *evaluatedModel) dropMemory() {
	e.mu.Lock()
	e.snap = nil
	e.mu.Unlock()
}

// serve calls f with the snapshot in memory or the path of its file (nil
// and "" if none); the snapshot stays whole until f returns.
func (e *evaluatedModel) serve(f func(*Snapshot, string)) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	f(e.snap, e.file)
}
