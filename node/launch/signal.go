package launch

import (
	"fmt"
	"os"
)

// Signal sends sig to node i (the fault tests pause and resume nodes with
// SIGSTOP and SIGCONT).
func (m *Mesh) Signal(i int, sig os.Signal) error {
	p := m.Procs[i]
	if !p.Alive() {
		return fmt.Errorf("up: node %d is not running", i)
	}
	return p.cmd.Process.Signal(sig)
}
