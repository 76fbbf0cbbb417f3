// Package trust is a node's view of other nodes' identities and the
// operator's revocations ([Trust]): which ids are revoked, the key pinned
// for each legacy id, and the check every handshake and gossip message
// passes. It gets what it needs through [Deps] (the data dir's record, the
// transport, the membership, the shard manager as [Shards], the operator
// MAC's check, the control channel's relay); it never sees the node. It
// imports node/datadir for the record's type (identities.json) and
// node/records for the event and the revocations a mesh view carries.
//
// # Identities
//
// The node's id and key pair live in its data dir (node/datadir; a fresh
// id is derived from the key, mesh.DeriveID). Its identity view
// (identities.go) holds the ids revoked and the key pinned for each legacy
// id (an earlier build's random id, not derived from its key): the union
// of its replicas' replicated state ([Shards].Identities, merged every
// second by [Trust.Run]) and its data dir's record (identities.json, which
// also keeps the pins an earlier build made on first use), so a restart
// refuses a revoked node before its replicas replay their logs. A legacy
// self pins its own key and proposes it on the shards it leads. The view
// refuses peers in every handshake of the transport (mesh.PeerCheck) and
// in memberlist's alive messages: a revoked id; a legacy id under another
// key than its pin, or one pinned to two keys; and a legacy id pinned
// nowhere in the view, with an error naming it and saying to use a
// self-certifying id (a fresh --data-dir). So no new member takes a legacy
// id (one it chooses, to sort first); the legacy ids of an upgraded mesh,
// pinned already, keep working. A new node joining such a mesh starts
// with an empty view, so it refuses those members too: it joins with a
// member's identities.json copied into its data dir before its first
// start.
// [Trust.Members], the node's membership view, leaves revoked and
// refused nodes out, so placement, the evaluator and /status never count
// one.
//
// # Revocation
//
// An operator revokes an id with POST /revoke (dssp revoke,
// [Trust.WithRevoke]), whose HMAC under the mesh key's operator key is
// checked by Deps.Verify ([Trust.Revoke]): the node refuses the id,
// relays the request to every other member over the control channel
// (Deps.Relay, the node's op "revoke": each checks the MAC itself,
// [Trust.Take]) so a revoked shard leader loses its followers, and asks
// every shard's group to apply it (shardapi.Client.Revoke). The mesh view
// each node asks its peers for every second (op "view") carries the
// revocations it holds with their MACs ([Trust.Revocations]), and the
// asking node takes those whose MAC it checks ([Trust.TakeFromView]), so
// a node that joins later and hosts no replica learns them too. /status
// lists the revoked ids, the pinned keys' count and the conflicting legacy
// ids ([Trust.Status]). At most shardapi.MaxIdentities ids are revoked (as
// every shard keeps), a further revocation refused. A revocation not
// authenticated by the mesh key (POST /revoke, a relay) is refused,
// counted ([Trust.Refused]) and logged once a minute per route. The
// revoked node is told first (the relay, before the others cut it off),
// or learns it from a peer's view or its replicas' state: it logs one
// ERROR line, says so in /status and stops (Deps.OnSelfRevoked).
//
// # Concurrency
//
// Safe for concurrent use. The handshake check and memberlist's verdict
// take only the view's lock, briefly. Lock order: the sync lock (one
// merge and one identities.json write at a time) before Deps.Shards
// (which may take the node's lock for reading) and before the view's
// lock; the view's lock is held across no call.
package trust
