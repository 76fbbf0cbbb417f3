// Package modelfile is the model file of dssp: a model's flat parameter
// vector saved as safetensors (the weights format of the ML ecosystem,
// readable by PyTorch, JAX, numpy and others), and a folder of periodic
// checkpoints with retention.
//
// # The file
//
// The safetensors layout (github.com/nlpodyssey/safetensors encodes and
// decodes it): an 8-byte little-endian header length, a JSON header naming
// every tensor with its dtype, shape and byte range, then the data. dssp
// writes one F32 tensor per range of the model's flat layout
// (cudaops.Model.Layout), named as the layout names it ("fc1.weight",
// "fc1.bias", "conv1.weight", …) with its real shape (dense weights [out,
// in], conv weights [outC, inC, kH, kW]). The header's "__metadata__" (a
// string-to-string map) carries [Meta]: the model and dataset names, the
// tensor shapes ("layers"), the training clock, for a mesh snapshot each
// shard's clocks, and the evaluation when there was one. Values that are
// not strings are JSON inside the string.
//
// [Read] (and [ReadFile]) reads a file header first, bounded by
// MaxHeaderBytes, and then only the data the header declares within a
// limit, so /dev/zero or an endless HTTP body is refused after 8 bytes.
// [Decode] validates the whole header (offsets contiguous, sizes equal to
// dtype × shape, the buffer exactly covered) and never panics on bad input;
// [File.Params] then checks the file against a model's layout — every
// tensor present, F32, with the layout's shape, and no other tensor — and
// names the first tensor that differs.
//
// # Writing
//
// [WriteFile] writes atomically: a temporary file in the destination's
// folder, synced, renamed over the destination, and the folder synced, so
// a reader sees the old file or the new one, never half of one.
//
// # Checkpoints
//
// [Checkpoints] is a folder of files named ckpt-<UTC time>-c<clock>.safetensors
// (lexical order is time order) of which the newest Keep are kept. Save
// refuses parameters or an evaluation loss that are not finite
// ([ErrNotFinite]), so the newest checkpoint is always the last good one
// and a diverging job never rotates good checkpoints out. Checkpoints is
// safe for concurrent use; Save blocks on disk I/O.
package modelfile
