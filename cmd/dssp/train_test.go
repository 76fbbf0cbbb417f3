package main

import (
	"bytes"
	"testing"
)

// TestProgressLineWholeLinesWhenPiped: `dssp train`'s step progress is
// redrawn with \r only on a terminal; piped, every update is a line.
func TestProgressLineWholeLinesWhenPiped(t *testing.T) {
	var piped bytes.Buffer
	p := newProgressLine(&piped)
	p.show("epoch 1/2  step 100/938", false)
	p.show("epoch 1/2  step 938/938", true)
	if got, want := piped.String(), "epoch 1/2  step 100/938\nepoch 1/2  step 938/938\n"; got != want {
		t.Errorf("piped progress %q, want %q", got, want)
	}
	var term bytes.Buffer
	p = &progressLine{w: &term, tty: true}
	p.show("a", false)
	p.show("b", true)
	if got, want := term.String(), "\ra\rb\n"; got != want {
		t.Errorf("terminal progress %q, want %q", got, want)
	}
}
