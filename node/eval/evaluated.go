package eval

import (
	"os"
	"sync"

	"dsspmesh/node/records"
)

// evaluatedModel holds the snapshot this node last evaluated, for
// GET /model.safetensors?evaluated: in memory (snap), or for a model whose
// evaluation borrows the worker's θ (node/worker/lend.go) in a file of the data dir
// (file, EvaluatedFile), written while θ was lent. A model held in
// memory is held twice: the next evaluation reads into a spare copy while
// snap stays whole to serve, and replacing snap (swap) hands the old one's
// memory back as the next spare — so ?evaluated answers all through an
// evaluation, however long it takes (an evaluator that evaluates for
// most of every period would otherwise almost never hold one). Models
// from node/eval's LendBytes on are never held in memory.
type evaluatedModel struct {
	mu   sync.RWMutex // held for reading while an export streams snap
	snap *Snapshot
	file string // replaced by a rename: an export streaming the old one reads it whole
	// claim is the evaluation of snap or file, its Digest theirs (nil
	// with neither).
	claim *records.EvalResult
}

// EvaluatedFile is the evaluated snapshot of a large model, in the data dir.
const EvaluatedFile = "evaluated.safetensors"

// swap keeps s, evaluated as claim says, in memory and returns the parameters' memory of the
// snapshot it replaces (nil when none), which no export reads any more: the
// next evaluation reads into it.
func (e *evaluatedModel) swap(s *Snapshot, claim *records.EvalResult) []float32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var old []float32
	if e.snap != nil {
		old = e.snap.Theta
	}
	e.snap, e.file, e.claim = s, "", claim
	return old
}

// set keeps s in memory, or when file is set, says the snapshot is
// there; claim is its evaluation.
func (e *evaluatedModel) set(s *Snapshot, file string, claim *records.EvalResult) {
	e.mu.Lock()
	e.snap, e.file, e.claim = s, file, claim
	e.mu.Unlock()
}

// replaceFile renames next over file and says the snapshot is there,
// evaluated as claim says: under the lock, so no export sends the new
// file with the old claim.
func (e *evaluatedModel) replaceFile(next, file string, claim *records.EvalResult) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := os.Rename(next, file); err != nil {
		return err
	}
	e.snap, e.file, e.claim = nil, file, claim
	return nil
}

// dropMemory drops a snapshot kept in memory but keeps a file: before an
// evaluation that borrows the worker's θ, memory is what it saves, and
// the file stays whole until the next one replaces it by a rename, so
// ?evaluated answers all through the evaluation.
func (e *evaluatedModel) dropMemory() {
	e.mu.Lock()
	e.snap = nil
	if e.file == "" {
		e.claim = nil
	}
	e.mu.Unlock()
}

// serve calls f with the snapshot in memory or the path of its file (nil
// and "" if none) and its claim; the snapshot stays whole until f
// returns.
func (e *evaluatedModel) serve(f func(snap *Snapshot, file string, claim *records.EvalResult)) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	f(e.snap, e.file, e.claim)
}
