// Package mesh owns everything one dssp node needs to find and talk to the
// others: membership, node identity and security, the QUIC transport and its
// frames, an in-memory transport for tests, and shard placement.
//
// # Membership
//
// [Membership] is our own small interface over gossip (join by seed
// addresses, leave, the live member list, join/leave/update/failed events,
// and suspect and rejected events for the operator's record: memberlist
// reports a suspicion only in the log line of the node whose probe went
// unanswered, so only that node emits EventSuspect; EventRejected is a peer
// whose metadata does not decode or names another id). Join retries with
// backoff until its context ends; [WithJoinTrace] on that context reports
// each failed attempt ([JoinAttempt]: its number, the wait before the
// next, which seeds it reached), for a caller to tell its user how a long
// join goes.
// [NewMemberlist] implements it on hashicorp/memberlist; [InmemCluster] gives
// an in-memory twin whose failures are injected by the test. Each member's
// [Meta] (node id, QUIC address, trains?, backend, protocol version) travels
// in memberlist's node metadata, encoded compactly (≤ [MaxMetaSize] bytes);
// decoding a peer's metadata never panics. Events are queued without bound
// and delivered in order on [Membership.Events]; a slow reader never stalls
// gossip. Members returns a snapshot sorted by node id that the caller owns;
// the memberlist implementation decodes its list once per membership event
// (join, leave, failure, metadata update) and serves copies in between,
// rebuilding at least once a second.
//
// # Security
//
// One 32-byte mesh key ([LoadKeyFile], [WriteKeyFile]) secures everything
// (docs/design.md#mesh-and-security). HKDF-SHA256 derives from it the
// memberlist gossip key, the seed of a deterministic ed25519 mesh CA
// (every holder of the key derives byte-identical CA certificates) and the
// operator's HMAC key ([MeshKey.OperatorMAC], [Security.VerifyOperator]:
// an operator's request over HTTP, such as a revocation).
// Each node keeps its own ed25519 key pair (node/datadir) and gets a
// certificate for its [NodeID] carrying that key, signed by the CA
// ([Security.NodeWithKey]; [Security.Node] issues one on a fresh key, for
// tests). A self-certifying id ([DeriveID], nodeid.go: "node-" and 128
// bits of SHA-256 of the public key) is accepted only under a certificate
// whose key it derives from, so the mesh key admits members but cannot
// speak as one; any other id is a legacy id, checked by the node's
// [PeerCheck].
// QUIC runs mutual TLS 1.3 with ALPN [ALPN]; both sides verify the peer's
// chain against the mesh CA and a self-certifying id against the key, then
// ask the node's [PeerCheck] (revoked ids, pinned keys of legacy ids;
// [QUICTransport.SetPeerCheck], [QUICTransport.ClosePeer] for the
// connections already open); the dialler checks that the certificate names
// the node id it meant to reach, and the acceptor takes the certificate's
// id as the peer's identity. Memberlist ignores the alive messages of a
// node its admit refuses (SetAdmit on [NewMemberlist]'s membership). The
// in-memory transport takes a PeerCheck too (asked with no key).
// [InsecureSecurity] turns the chain and derivation checks off (plain
// gossip, self-signed certificates) and logs a warning: for experiments
// only.
//
// # Transport
//
// [Transport] opens typed streams to peers. A stream is addressed by a
// [Channel]: its kind ([KindRPC], [KindRaft]) and a shard id, named in a fixed
// 8-byte preamble so the acceptor can route it to the [Listener] of that
// channel. A [Stream] carries either frames ([Stream.SendFrame],
// [Stream.RecvFrame]) or raw bytes (it is a net.Conn, which is what raft's
// NetworkTransport gets), never both. Streams are long-lived and meant to be
// reused (one push stream per shard leader); connections to a peer are cached
// and re-established on the next Dial once broken.
//
// Frames are a fixed 8-byte length prefix, a msgpack header and raw payload
// bytes that the mesh does not interpret (a shard's tensors travel in the
// job's wire precision, fp32, bf16 or int8, laid out by package shardapi's
// codec); the layout is written in frame.go. Every length a peer sends is checked against
// [FrameLimits] before anything is allocated, and the header's msgpack is
// structurally validated (every declared length must fit in the bytes that
// remain, nesting is bounded) before it is decoded, so no input can make the
// decoder allocate more than a small multiple of the header size. A bad frame
// closes the stream, increments [Stats].FrameErrors and returns an error
// wrapping [ErrBadFrame]; the node stays up. A service that knows the size
// of its frames lowers the payload limit of one stream with
// [Stream.SetMaxPayload] (a shard: its own gradient size). One
// authenticated peer may hold at most TransportConfig.MaxConnsPerPeer
// connections to a node: beyond it the peer's oldest are closed
// ([Stats].ConnsRefused). A connection Dial gives up on is closed, not
// left alive unused — unless it still hears its peer (a packet within
// IdleTimeout/2): a busy live connection is kept, with its streams.
//
// Concurrency: Transport, Listener and Membership methods are safe for
// concurrent use. A Stream allows one concurrent sender and one concurrent
// receiver. RecvFrame returns a payload the caller owns; SendFrame does not
// keep the payload after it returns.
//
// Blocking and ambiguity: Dial blocks until the stream is open or ctx ends.
// SendFrame blocks on flow control (bounded by the stream's deadline). An
// error from SendFrame or RecvFrame on a request stream is ambiguous: the
// peer may or may not have received and acted on the request; callers resend
// with the same idempotency key (the shard layer's (worker, iter)).
//
// A node's stream to itself (a worker pushing to the shard its own node
// leads) never touches QUIC: [QUICTransport] makes it of two in-memory
// pipes, as [InmemTransport]'s streams are, and delivers it to its own
// listener; no connection, packet, AEAD or syscall, and the node always
// hears itself ([SilenceReporter]; [RTTReporter] is the round trip each
// peer's connections measured, 0 to itself). Nothing crosses a process boundary, so
// there is nothing to authenticate; the far end's Peer is the node itself.
// A payload of 256 KiB or more is lent to the reader, not copied: SendFrame
// returns once the reader has taken it (or the write deadline passes, or
// the stream closes, which cuts the frame), so a large model's 6 MB push to
// itself never exists twice and a slow reader holds its sender back, as
// QUIC's flow control would.
//
// [InmemTransport] (from [InmemNetwork.NewTransport]) implements the same
// interface in memory; the network's [FaultHook] can drop, delay, duplicate
// or corrupt whole frames (each Write of a raw stream counts as one frame),
// and [InmemNetwork.Partition] cuts nodes apart.
//
// # Placement
//
// [PlaceAll] assigns shards to replicas by rendezvous hashing with bounded
// loads over the node ids given (no node above ⌈shards·r/n⌉ replicas); the
// result depends only on that set, so every node with the same membership
// view computes the same replica sets, and a join or leave moves the
// replicas that hash to the node concerned and a few more where the cap
// changes.
//
// Lock order: InmemCluster.mu before an eventQueue's mu; a listenerSet's mu
// is taken alone (a stream to itself is delivered after QUICTransport.mu is
// released); no other two locks are ever held together. No lock is held
// while calling memberlist or a FaultHook, nor while quic-go dials or
// accepts.
package mesh
