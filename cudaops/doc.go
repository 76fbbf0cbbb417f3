// Package cudaops holds tensors, compute backends, layers, models, the flat
// parameter layout and datasets.
package cudaops
