package python

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestFindPrefersTheEnvironment: an interpreter named by $DSSP_PYTHON that
// imports the modules is the one found, before python3 on PATH.
func TestFindPrefersTheEnvironment(t *testing.T) {
	p, err := exec.LookPath("python3")
	if err != nil {
		p, err = exec.LookPath("/usr/bin/python3")
	}
	if err != nil {
		t.Skip("no python3 here")
	}
	link := filepath.Join(t.TempDir(), "py")
	if err := os.WriteFile(link, []byte("#!/bin/sh\nexec "+p+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(Env, link)
	if got, ok := Find(); !ok || got != link {
		t.Fatalf("Find() = %q, %v; want %q, true", got, ok, link)
	}
}

// TestFindNamesNoneWithoutTheModule: a module no candidate imports finds
// nothing.
func TestFindNamesNoneWithoutTheModule(t *testing.T) {
	t.Setenv(Env, "")
	if got, ok := Find("dssp_no_such_module"); ok || got != "" {
		t.Fatalf("Find(dssp_no_such_module) = %q, %v; want \"\", false", got, ok)
	}
}
