package node

// SetEvalLendBytes sets the model size from which an evaluation borrows
// the worker's θ (lend.go) for the external tests, and returns the undo.
func SetEvalLendBytes(n int) (restore func()) {
	old := evalLendBytes
	evalLendBytes = n
	return func() { evalLendBytes = old }
}
