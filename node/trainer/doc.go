// Package trainer is a node's bridge to an external trainer process (a
// PyTorch training loop, dsspmesh in python/): the Unix socket a trainer
// attaches to ([Server]), the framing of its messages, the shared-memory
// file the tensors sit in ([Shm]) and [External], the worker's compute
// (node/worker.Compute) that asks the attached trainer for each gradient.
// [Host] is the node's side of --trainer external: the socket, each
// trainer's layout checked against the job's ([HostDeps].Job), the first
// trainer of a new external job fixing the layout and θ₀
// ([Host.AwaitLayout]; with --init-from a file that names no layout, the
// trainer orders the file's tensors), the evaluation by the attached
// trainer ([Host.Evaluate]) and the socket's record for /status
// ([Host.Status]). A --model external job's layout is so fixed on the
// bootstrap node before the shards are created, and travels in the job
// spec (node/job); the evaluator's trainer evaluates. The node owns the worker's lifecycle around it
// (node/external.go): it starts a worker on each trainer [Host.Attached]
// hands over and removes it from the shards when the trainer goes.
//
// # Protocol (version 2)
//
// docs/design.md, "External trainers", has the whole exchange. Every
// message is a 4-byte little-endian length followed by that many bytes of
// one JSON object with an "op" ([ReadFrame], [WriteFrame]); a frame over
// Config.MaxFrame (1 MiB by default) ends the attachment. Tensors never
// travel on the socket: they sit in a file under /dev/shm (else beside the
// socket), mode 0600, made exclusively under a random name the welcome
// carries ([NewShm]: no other Unix user can take it first; a failure is
// the refusal code "shm" naming the file and its owner), three regions of
// 4·P bytes of little-endian float32
// (P the values of the model's state: parameters and persistent buffers,
// whatever their dtypes): theta (node → trainer), update (trainer →
// node), eval (node → trainer).
//
// A trainer says hello with its layout (each tensor's dtype, kind and
// aliases: [Tensor]); the server checks it against the job's through
// Deps.Admit and answers welcome — with what an update holds
// ([UpdateDelta], the trainer's own optimizer's change, under the combine
// rule mean; [UpdateGradient] under sum) and the job's optimizer — or an
// error with a code (layout-mismatch, version, busy, job-mismatch,
// not-external) and closes. One trainer is attached at a time. Per
// iteration the node writes θ into theta and sends compute; the trainer
// writes its update and answers update, which is checked (the iteration
// echoed, a finite loss, samples within the range asked) before the region
// is handed to the worker: peer input never panics the node and a bad
// message ends the attachment with a [*ProtocolError]. A trainer may
// evaluate off its training path: it acks evaluate with "evaluating" once
// it took the eval region and sends "evaluated" later, between its
// updates ([External.Evaluate] releases the exchange meanwhile). The node ends an
// attachment with stop: [StopEnd] when training is over for the trainer,
// [StopStopped] with the reason when it stopped the trainer's worker
// ([External.Stop]). A trainer that stays silent past
// its [AnswerLimits] (10 minutes for its first update, then 50 × its mean
// round trip, at least 2 minutes) is taken for hung and detached: alive
// but silent it would hold every worker of the mesh at the gate.
//
// # Copies
//
// The worker keeps its θ in the theta region itself ([External.Theta],
// node/worker's ThetaHolder): the slices the shards return land there and
// the trainer reads them in place, so a Gradient copies nothing. A θ held
// elsewhere is copied in (4·P bytes; [Stats] counts the bytes and the
// time). The gradient goes to the worker's encoders straight from the
// update region. Nothing is allocated per iteration on the node's side
// but the decoded update message.
//
// # Concurrency
//
// [Server.Serve] is one goroutine accepting connections; each attachment
// has one reader goroutine that decodes the trainer's messages. An
// [External]'s exchanges (Gradient, Evaluate) take its mutex for the whole
// request and answer, so an evaluate goes only between an update and the
// next compute; writes to the socket take the write mutex, innermost.
// [External.Done] is closed when the attachment ends (EOF, a protocol
// error, [External.Close]); every wait after that returns
// [ErrTrainerGone]. A [Host]'s lock is innermost: taken under no other
// lock, held across no call.
package trainer
