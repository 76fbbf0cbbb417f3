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
	return &Security{gossipKey: key.derive(infoGossip, 32), ca: ca, caKey: caKey, pool: pool}, nil
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
	sec  *Security
	id   NodeID
	cert tls.Certificate
}

// Node issues a certificate for id: a fresh key pair signed by the mesh CA
// (self-signed in insecure mode).
func (s *Security) Node(id NodeID) (*NodeCredentials, error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mesh: node key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("mesh: serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: string(id)},
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
	return &NodeCredentials{sec: s, id: id, cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}}, nil
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
		VerifyConnection: func(cs tls.ConnectionState) error { _, err := c.sec.verifyPeer(cs, ""); return err },
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
		VerifyConnection:   func(cs tls.ConnectionState) error { _, err := c.sec.verifyPeer(cs, expected); return err },
	}
}

// verifyPeer checks the peer's chain against the mesh CA and, when expected
// is set, that the certificate names it. It returns the certificate's id.
func (s *Security) verifyPeer(cs tls.ConnectionState, expected NodeID) (NodeID, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", fmt.Errorf("%w: peer sent no certificate", ErrPeerIdentity)
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
			return "", fmt.Errorf("%w: certificate for %q not signed by this mesh's CA: %v", ErrPeerIdentity, leaf.Subject.CommonName, err)
		}
	}
	id := NodeID(leaf.Subject.CommonName)
	if err := id.Validate(); err != nil {
		return "", fmt.Errorf("%w: %v", ErrPeerIdentity, err)
	}
	if expected != "" && id != expected {
		return "", fmt.Errorf("%w: dialled %q but its certificate names %q", ErrPeerIdentity, expected, id)
	}
	return id, nil
}

// peerID returns the verified id of the peer of an established connection.
func peerID(cs tls.ConnectionState) (NodeID, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", fmt.Errorf("%w: no peer certificate", ErrPeerIdentity)
	}
	id := NodeID(cs.PeerCertificates[0].Subject.CommonName)
	return id, id.Validate()
}
