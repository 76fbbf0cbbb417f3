package mesh

import (
	"crypto/hmac"
	"crypto/sha256"
	"time"

	"github.com/quic-go/quic-go"
)

// statelessResetKey is the node's QUIC stateless reset key: the same for
// every process of one node id in one mesh, so that a node restarted on its
// port answers packets of its previous incarnation's connections with a
// stateless reset (RFC 9000 §10.3) and its peers drop those connections at
// once instead of after IdleTimeout of silence (a killed leader's peers
// would otherwise keep sending Raft and pushes into a dead connection).
// With a mesh key it is an HMAC of the id under the mesh CA's private key,
// so only mesh members can forge resets; insecure meshes derive it from
// the id alone.
func (c *NodeCredentials) statelessResetKey() *quic.StatelessResetKey {
	var secret []byte
	if !c.sec.insecure {
		secret = c.sec.caKey.Seed()
	}
	m := hmac.New(sha256.New, append([]byte("dssp mesh v1 quic stateless reset "), secret...))
	m.Write([]byte(c.id))
	var k quic.StatelessResetKey
	copy(k[:], m.Sum(nil))
	return &k
}

// keepAlive is the keep-alive period: a quarter of IdleTimeout.
func (c TransportConfig) keepAlive() time.Duration { return c.IdleTimeout / 4 }
