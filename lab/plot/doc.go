// Package plot draws the PNG charts of `dssp up`'s report (test accuracy
// and worker clocks over the run, kills marked) with gonum.org/v1/plot.
// It is lab code: node/launch writes the report's CSV files and calls
// [Up] through launch.Config.Charts only when the command wires it in,
// so neither the launcher's nor the node's own code links a plotting
// library. Charts are drawn from the samples a run already holds;
// nothing here reads a node.
package plot
