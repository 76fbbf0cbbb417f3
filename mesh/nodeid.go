package mesh

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
)

// Self-certifying node ids. A node's id is derived from its own ed25519
// public key: "node-" followed by the first 128 bits of
// SHA-256("dssp node id v1\x00" ‖ public key) in lowercase base32 without
// padding (26 characters). A certificate for such an id must carry the
// public key it is derived from ([Security] checks it on every handshake),
// so the mesh key, which signs every certificate, admits members but cannot
// speak as one: making a key pair whose id is a chosen id is a preimage of
// 128 bits of SHA-256.
//
// An id of any other form (the 8 hex digits "node-xxxxxxxx" of data dirs
// made before self-certifying ids, or a name a test gives) is a legacy id:
// the handshake checks only the chain, and the node's [PeerCheck] decides
// (a node pins the first key it sees for a legacy id).
const (
	derivedIDPrefix = "node-"
	derivedIDBits   = 128
	derivedIDChars  = (derivedIDBits + 4) / 5 // 26
	derivedIDLabel  = "dssp node id v1\x00"
)

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// DeriveID returns the self-certifying id of pub.
func DeriveID(pub ed25519.PublicKey) NodeID {
	h := sha256.Sum256(append([]byte(derivedIDLabel), pub...))
	s := strings.ToLower(idEncoding.EncodeToString(h[:derivedIDBits/8]))
	return NodeID(derivedIDPrefix + s[:derivedIDChars])
}

// SelfCertifying reports whether id has the form of a derived id ("node-"
// and 26 characters of [a-z2-7]); such an id is accepted only under a
// certificate whose key it is derived from.
func (id NodeID) SelfCertifying() bool {
	s, ok := strings.CutPrefix(string(id), derivedIDPrefix)
	if !ok || len(s) != derivedIDChars {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// GenerateNodeKey returns a fresh ed25519 key pair for a node.
func GenerateNodeKey() (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mesh: node key: %w", err)
	}
	return priv, nil
}

// PeerCheck is a node's own verdict on a peer whose certificate the mesh CA
// signed and whose id (if self-certifying) matches its key: it returns an
// error to refuse the handshake (a revoked id, a legacy id pinned to
// another key). key is the certificate's key when the certificate marks it
// as the node's own for life (every certificate of [Security.NodeWithKey]),
// nil otherwise (a certificate of a build before self-certifying ids, made
// on a fresh key at each start; the in-memory transport's streams). It is
// called during the TLS handshake of every connection, accepted or
// dialled, and must be safe for concurrent use and quick.
type PeerCheck func(id NodeID, key ed25519.PublicKey) error

// checkDerived refuses a self-certifying id under a key it is not derived
// from.
func checkDerived(id NodeID, pub ed25519.PublicKey) error {
	if !id.SelfCertifying() {
		return nil
	}
	if got := DeriveID(pub); got != id {
		return fmt.Errorf("%w: certificate for %q carries a key whose id is %q (a certificate minted with the mesh key for another node's id)", ErrPeerIdentity, id, got)
	}
	return nil
}
