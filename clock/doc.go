// Package clock holds the per-worker vector clocks and the synchronization
// paradigms (BSP, ASP, SSP, DSSP) as pure, deterministic gate logic.
package clock
