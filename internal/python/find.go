package python

import (
	"os"
	"os/exec"
	"strings"
)

// Env names the interpreter to try first.
const Env = "DSSP_PYTHON"

// Find returns the first of $DSSP_PYTHON, python3 and /usr/bin/python3
// that imports every module of modules, and whether one did.
func Find(modules ...string) (string, bool) {
	cands := []string{"python3", "/usr/bin/python3"}
	if p := os.Getenv(Env); p != "" {
		cands = append([]string{p}, cands...)
	}
	code := "import " + strings.Join(append([]string{"sys"}, modules...), ", ")
	for _, p := range cands {
		if exec.Command(p, "-c", code).Run() == nil {
			return p, true
		}
	}
	return "", false
}
