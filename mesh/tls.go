package mesh

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"sync/atomic"
	"time"
)

// ALPN is the application protocol every mesh QUIC connection negotiates.
const ALPN = "dssp-mesh/1"

// Security holds what a mesh key derives: the gossip key and the mesh CA.
type Security struct {
	insecure  bool
	gossipKey []byte
	ca        *x509.Certificate
	caKey     ed25519.PrivateKey
	pool      *x509.CertPool
	opKey     []byte // the operator's HMAC key (operator.go)
}

// The CA certificate must be byte-identical on every node, so nothing in it
// may depend on the clock or on randomness (ed25519 signatures are
// deterministic).
var (
	caNotBefore = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	caNotAfter  = time.Date(2124, 1, 1, 0, 0, 0, 0, time.UTC)
)

// NewSecurity derives the gossip key and the mesh CA from key.
func NewSecurity(key MeshKey) (*Security, error) {
	caKey := ed25519.NewKeyFromSeed(key.derive(infoCA, ed25519.SeedSize))
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "dssp mesh CA"},
		NotBefore:             caNotBefore,
		NotAfter:              caNotAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("mesh: create CA: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("mesh: parse CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &Security{gossipKey: key.derive(infoGossip, 32), ca: ca, caKey: caKey, pool: pool, opKey: key.derive(infoOperator, 32)}, nil
}

// InsecureSecurity turns off gossip encryption and certificate checks. It
// logs a warning, since anyone who can reach the node can then join, vote
// and push.
func InsecureSecurity(log *slog.Logger) *Security {
	log.Warn("mesh running INSECURE: gossip is unencrypted and peers are not authenticated; use only for experiments")
	return &Security{insecure: true}
}

// Insecure reports whether s is the insecure mode.
func (s *Security) Insecure() bool { return s.insecure }

// GossipKey returns memberlist's 32-byte encryption key, or nil if insecure.
func (s *Security) GossipKey() []byte { return s.gossipKey }

// CACertificate returns the DER of the mesh CA (nil if insecure).
func (s *Security) CACertificate() []byte {
	if s.ca == nil {
		return nil
	}
	return s.ca.Raw
}

// NodeCredentials is one node's certificate and the TLS configurations
// built on it.
type NodeCredentials struct {
	sec   *Security
	id    NodeID
	pub   ed25519.PublicKey
	cert  tls.Certificate
	check atomic.Pointer[PeerCheck]
}

// Node issues a certificate for id on a fresh key pair, signed by the mesh
// CA (self-signed in insecure mode). id is then a legacy id (a
// self-certifying id needs the key it derives from: [Security.NodeWithKey]);
// tests and benchmarks use it.
func (s *Security) Node(id NodeID) (*NodeCredentials, error) {
	priv, err := GenerateNodeKey()
	if err != nil {
		return nil, err
	}
	if id.SelfCertifying() {
		return nil, fmt.Errorf("%w: %q is a self-certifying id: issue it with the key it derives from", ErrBadNodeID, id)
	}
	return s.issue(id, priv)
}

// NodeWithKey issues a certificate for id carrying priv's public key,
// signed by the mesh CA. A self-certifying id must be the one priv's public
// key derives to ([DeriveID]); a legacy id may carry any key.
func (s *Security) NodeWithKey(id NodeID, priv ed25519.PrivateKey) (*NodeCredentials, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("mesh: node key of %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	if err := checkDerived(id, priv.Public().(ed25519.PublicKey)); err != nil {
		return nil, err
	}
	return s.issue(id, priv, lifelongKeyOU)
}

// IssueUnchecked signs a certificate for id on priv's public key, marked
// lifelong, without checking that the id derives from the key: what any
// holder of the mesh key can do with the CA it derives. Every peer's
// handshake refuses the result for a self-certifying id that is not the
// key's; the hostile-member tests use it to show so. Nodes never call it.
func (s *Security) IssueUnchecked(id NodeID, priv ed25519.PrivateKey) (*NodeCredentials, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("mesh: node key of %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	return s.issue(id, priv, lifelongKeyOU)
}

// lifelongKeyOU marks a certificate whose key is the node's own for life
// (kept in its data dir): only such a key is pinned to a legacy id
// ([PeerCheck]). Certificates of builds before self-certifying ids, made
// on a fresh key at every start, have no such mark.
const lifelongKeyOU = "dssp lifelong node key v1"

// issue signs a certificate for id on priv's public key without checking
// that they belong together (a test mints a forged one with it), with the
// organizational units ou.
func (s *Security) issue(id NodeID, priv ed25519.PrivateKey, ou ...string) (*NodeCredentials, error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	pub := priv.Public().(ed25519.PublicKey)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("mesh: serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: string(id), OrganizationalUnit: ou},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	parent, signer := tmpl, any(priv)
	if !s.insecure {
		parent, signer = s.ca, s.caKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, fmt.Errorf("mesh: node certificate: %w", err)
	}
	return &NodeCredentials{sec: s, id: id, pub: pub, cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}}, nil
}

// PublicKey is the node's public key, the one its certificate carries.
func (c *NodeCredentials) PublicKey() ed25519.PublicKey { return c.pub }

// SetPeerCheck installs the node's own verdict on peers, run on every
// handshake after the chain and the id's derivation are checked (nil
// removes it). Connections already open are not re-checked: close them
// ([QUICTransport.ClosePeer]).
func (c *NodeCredentials) SetPeerCheck(f PeerCheck) {
	if f == nil {
		c.check.Store(nil)
		return
	}
	c.check.Store(&f)
}

// verifyPeer is the Security's check, then the node's PeerCheck.
func (c *NodeCredentials) verifyPeer(cs tls.ConnectionState, expected NodeID) error {
	id, pub, err := c.sec.verifyPeer(cs, expected)
	if err != nil {
		return err
	}
	if f := c.check.Load(); f != nil {
		if err := (*f)(id, pub); err != nil {
			return fmt.Errorf("%w: %v", ErrPeerIdentity, err)
		}
	}
	return nil
}

// ID is the node id the certificate names.
func (c *NodeCredentials) ID() NodeID { return c.id }

// ServerTLS is the configuration for accepting connections: it requires a
// client certificate chaining to the mesh CA.
func (c *NodeCredentials) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		NextProtos:       []string{ALPN},
		Certificates:     []tls.Certificate{c.cert},
		ClientAuth:       tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error { return c.verifyPeer(cs, "") },
	}
}

// ClientTLS is the configuration for dialling the node expected: the
// server's certificate must chain to the mesh CA and name expected.
func (c *NodeCredentials) ClientTLS(expected NodeID) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{ALPN},
		Certificates: []tls.Certificate{c.cert},
		ServerName:   "dssp-mesh",
		// Chain and identity are checked by VerifyConnection against the
		// mesh CA rather than against host names.
		InsecureSkipVerify: true,
		VerifyConnection:   func(cs tls.ConnectionState) error { return c.verifyPeer(cs, expected) },
	}
}

// verifyPeer checks the peer's chain against the mesh CA, that a
// self-certifying id is derived from the certificate's key, and, when
// expected is set, that the certificate names it. It returns the
// certificate's id and, when the certificate says the key is the node's
// for life, its key (nil otherwise).
func (s *Security) verifyPeer(cs tls.ConnectionState, expected NodeID) (NodeID, ed25519.PublicKey, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", nil, fmt.Errorf("%w: peer sent no certificate", ErrPeerIdentity)
	}
	leaf := cs.PeerCertificates[0]
	if !s.insecure {
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := leaf.Verify(x509.VerifyOptions{
			Roots:         s.pool,
			Intermediates: inter,
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
		})
		if err != nil {
			return "", nil, fmt.Errorf("%w: certificate for %q not signed by this mesh's CA: %v", ErrPeerIdentity, leaf.Subject.CommonName, err)
		}
	}
	id := NodeID(leaf.Subject.CommonName)
	if err := id.Validate(); err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrPeerIdentity, err)
	}
	pub, ok := leaf.PublicKey.(ed25519.PublicKey)
	if !ok {
		return "", nil, fmt.Errorf("%w: certificate for %q carries a %T key, not ed25519", ErrPeerIdentity, id, leaf.PublicKey)
	}
	if err := checkDerived(id, pub); err != nil {
		return "", nil, err
	}
	if expected != "" && id != expected {
		return "", nil, fmt.Errorf("%w: dialled %q but its certificate names %q", ErrPeerIdentity, expected, id)
	}
	if !slices.Contains(leaf.Subject.OrganizationalUnit, lifelongKeyOU) {
		pub = nil // a key of one start only: nothing to pin
	}
	return id, pub, nil
}

// peerID returns the verified id of the peer of an established connection.
func peerID(cs tls.ConnectionState) (NodeID, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", fmt.Errorf("%w: no peer certificate", ErrPeerIdentity)
	}
	id := NodeID(cs.PeerCertificates[0].Subject.CommonName)
	return id, id.Validate()
}
