// Package node is one dssp process: config, lifecycle, the worker loop,
// evaluation and HTTP.
package node
