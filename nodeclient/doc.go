// Package nodeclient is the HTTP client of a running node: the one place
// that knows the paths, queries and reply formats of a node's --http-addr
// listener (GET /status, GET /model.safetensors, GET /metrics and the
// /debug/pprof pages). `dssp status`, `dssp export`, `dssp up` (package
// node/launch), the benchmarks under lab/ and the multi-process tests in
// test/ all read nodes through it.
//
// # Contract
//
// Every call takes a context and is bounded: [FetchStatus] by a short
// timeout fit for a live progress view, [FetchStatusWithin] and [Get] by
// the duration given, [FetchModel] by its context only (the node bounds
// its own read of the shards by the timeout passed). A reply other than
// 200 OK is an error that names the URL (and, for the model, carries the
// node's one-line reason, at most 4 KiB of it). What a call reads is
// bounded too: a /status reply by MaxStatusBytes, a [Get] by
// MaxReplyBytes, a model by the size its header declares (read first,
// modelfile.Read) within modelfile.MaxFileBytes; a longer reply is an
// error, so a peer answering with an endless body costs the caller no
// more than the bound. Calls hold no state and are safe for concurrent
// use; they use http.DefaultClient. Returned slices belong to the caller.
//
// A node answers /status from its own view: a node that does not answer is
// down or overloaded, not proof that the mesh is; callers decide how to
// count it.
package nodeclient
