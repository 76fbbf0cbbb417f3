package datadir

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"dsspmesh/mesh"
	"dsspmesh/node/job"
)

// Dir is a node's folder: its id (kept for life, so a restarted node is
// the same member, worker and Raft voter), the job spec it trains, the gossip
// addresses of peers last seen (seeds for a restart without --join), and the
// Raft state of its shards (raftstore.ShardDir). An exclusive lock keeps a
// second process off the same folder. It also records a fingerprint of the
// mesh key it was started with (never the key): a start with another key is
// refused by name ([Dir.CheckKey]) instead of sitting in joining while
// every peer's gossip fails to decrypt.
type Dir struct {
	Path string
	ID   mesh.NodeID
	// Key is the fingerprint of this start's mesh key ([KeyFingerprint]);
	// "" under --insecure, where nothing is checked or recorded.
	Key string
	// NodeKey is the node's own key pair (node.key): its certificate
	// carries the public half, and a self-certifying ID is derived from it
	// (mesh.DeriveID).
	NodeKey ed25519.PrivateKey
	lock    *os.File
}

const (
	idFile    = "node-id"
	specFile  = "spec.json"
	peersFile = "peers.json"
	lockFile  = "LOCK"
	keyFile   = "mesh-key.fingerprint"
	nodeKey   = "node.key"
	idsFile   = "identities.json"
)

// KeyFingerprint identifies a mesh key without revealing it: the first 16
// bytes of a SHA-256 over a label and the key, in hex.
func KeyFingerprint(k mesh.MeshKey) string {
	h := sha256.Sum256(append([]byte("dssp mesh key fingerprint v1\x00"), k[:]...))
	return hex.EncodeToString(h[:16])
}

// CheckKey refuses a start whose mesh key (d.Key) is not the one the data
// dir recorded: its peers could not read its gossip nor it theirs, and its
// shards' Raft state belongs to the other mesh. A data dir with no record
// (fresh, or written by a build that kept none) passes; [Dir.RecordKey]
// writes the record once the start has succeeded.
func (d *Dir) CheckKey() error {
	if d.Key == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(d.Path, keyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("data dir %s: %w", d.Path, unwrapPath(err))
	}
	if got := strings.TrimSpace(string(b)); got != d.Key {
		return fmt.Errorf("data dir %s was used with another mesh key (fingerprint %s in %s; this --key's is %s): start it with that mesh's key, or use a fresh --data-dir to join this key's mesh",
			d.Path, got, keyFile, d.Key)
	}
	return nil
}

// RecordKey writes d.Key's fingerprint unless the data dir already holds
// it; wrote reports whether it did.
func (d *Dir) RecordKey() (wrote bool, err error) {
	if d.Key == "" {
		return false, nil
	}
	if b, err := os.ReadFile(filepath.Join(d.Path, keyFile)); err == nil && strings.TrimSpace(string(b)) == d.Key {
		return false, nil
	}
	return true, d.writeFile(keyFile, []byte(d.Key+"\n"))
}

// Open creates path if needed, checks it is a writable folder, locks
// it, and reads or creates the node id. Every error names the folder.
func Open(path string) (*Dir, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", path, err)
	}
	if fi, err := os.Stat(abs); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("data dir %s is not a directory", abs)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("data dir %s cannot be created: %w", abs, unwrapPath(err))
	}
	probe, err := os.CreateTemp(abs, ".probe-*")
	if err != nil {
		return nil, fmt.Errorf("data dir %s is not writable: %w", abs, unwrapPath(err))
	}
	probe.Close()
	os.Remove(probe.Name())
	if _, err := os.ReadDir(abs); err != nil {
		return nil, fmt.Errorf("data dir %s is not readable: %w", abs, unwrapPath(err))
	}
	lock, err := os.OpenFile(filepath.Join(abs, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: lock: %w", abs, unwrapPath(err))
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("data dir %s is in use by another dssp node", abs)
	}
	d := &Dir{Path: abs, lock: lock}
	if d.NodeKey, err = d.loadOrCreateKey(); err != nil {
		d.Close()
		return nil, err
	}
	if d.ID, err = d.loadOrCreateID(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Close releases the lock.
func (d *Dir) Close() error {
	if d.lock == nil {
		return nil
	}
	err := d.lock.Close()
	d.lock = nil
	return err
}

// loadOrCreateKey reads node.key (the 32-byte ed25519 seed, mode 0600)
// or, in a data dir that has none (fresh, or made by a build before
// self-certifying ids), creates it.
func (d *Dir) loadOrCreateKey() (ed25519.PrivateKey, error) {
	path := filepath.Join(d.Path, nodeKey)
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		priv, err := mesh.GenerateNodeKey()
		if err != nil {
			return nil, err
		}
		if err := d.writeFile(nodeKey, priv.Seed()); err != nil {
			return nil, err
		}
		return priv, nil
	}
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", d.Path, unwrapPath(err))
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("data dir %s: %s has mode %04o; group and others must have no access (chmod 600 %s)", d.Path, nodeKey, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", d.Path, unwrapPath(err))
	}
	if len(b) != ed25519.SeedSize {
		return nil, fmt.Errorf("data dir %s: %s is %d bytes, want the %d-byte seed of the node's key (the file is damaged; a node whose id is derived from it cannot be restored: use a fresh --data-dir)", d.Path, nodeKey, len(b), ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(b), nil
}

// loadOrCreateID reads node-id or, in a fresh data dir, writes the id
// derived from the node's key. An id of the earlier form (node-xxxxxxxx,
// random) is kept: the node's key then travels in its certificate, and
// peers that pinned it (node/trust) accept it under that key only. A
// self-certifying id that is not the key's is refused.
func (d *Dir) loadOrCreateID() (mesh.NodeID, error) {
	b, err := os.ReadFile(filepath.Join(d.Path, idFile))
	if err == nil {
		id := mesh.NodeID(strings.TrimSpace(string(b)))
		if err := id.Validate(); err != nil {
			return "", fmt.Errorf("data dir %s: %s holds a bad node id %q: %w", d.Path, idFile, id, err)
		}
		if want := mesh.DeriveID(d.NodeKey.Public().(ed25519.PublicKey)); id.SelfCertifying() && id != want {
			return "", fmt.Errorf("data dir %s: %s holds %q, but %s derives %q: the key this id was made from is gone; use a fresh --data-dir", d.Path, idFile, id, nodeKey, want)
		}
		return id, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("data dir %s: %w", d.Path, unwrapPath(err))
	}
	id := mesh.DeriveID(d.NodeKey.Public().(ed25519.PublicKey))
	if err := d.writeFile(idFile, []byte(string(id)+"\n")); err != nil {
		return "", err
	}
	return id, nil
}

// Identities is what a node knows of other nodes' identities and keeps
// across restarts (identities.json): the ids revoked, and the key pinned
// for each legacy id (one not derived from its key), as its replicas'
// shards replicated them or as it saw them first.
type Identities struct {
	Revoked []mesh.NodeID `json:"revoked,omitempty"`
	// MACs are the operator's MACs of revocations (mesh.MeshKey.OperatorMAC),
	// which the node passes on to peers that check them.
	MACs map[mesh.NodeID][]byte            `json:"macs,omitempty"`
	Pins map[mesh.NodeID]ed25519.PublicKey `json:"pins,omitempty"`
}

// Identities returns the persisted identities (empty if none were).
func (d *Dir) Identities() (Identities, error) {
	var ids Identities
	b, err := os.ReadFile(filepath.Join(d.Path, idsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return ids, nil
	}
	if err != nil {
		return ids, fmt.Errorf("data dir %s: %w", d.Path, unwrapPath(err))
	}
	if err := json.Unmarshal(b, &ids); err != nil {
		return Identities{}, fmt.Errorf("data dir %s: %s: %w", d.Path, idsFile, err)
	}
	for _, id := range ids.Revoked {
		if err := id.Validate(); err != nil {
			return Identities{}, fmt.Errorf("data dir %s: %s: %w", d.Path, idsFile, err)
		}
	}
	for id, k := range ids.Pins {
		if err := id.Validate(); err != nil || len(k) != ed25519.PublicKeySize {
			return Identities{}, fmt.Errorf("data dir %s: %s: pin of %q with a key of %d bytes", d.Path, idsFile, id, len(k))
		}
	}
	return ids, nil
}

// SetIdentities persists ids.
func (d *Dir) SetIdentities(ids Identities) error {
	b, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	return d.writeFile(idsFile, b)
}

// Spec returns the persisted job spec; ok is false when there is none yet
// (a node that never trained).
func (d *Dir) Spec() (spec job.Spec, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(d.Path, specFile))
	if errors.Is(err, fs.ErrNotExist) {
		return job.Spec{}, false, nil
	}
	if err != nil {
		return job.Spec{}, false, fmt.Errorf("data dir %s: %w", d.Path, unwrapPath(err))
	}
	spec, err = job.Unmarshal(b)
	if err != nil {
		return job.Spec{}, false, fmt.Errorf("data dir %s: %s: %w", d.Path, specFile, err)
	}
	return spec, true, nil
}

// SetSpec persists the job spec.
func (d *Dir) SetSpec(s job.Spec) error {
	b, err := job.Marshal(s)
	if err != nil {
		return err
	}
	return d.writeFile(specFile, b)
}

// Peers returns the gossip addresses last persisted (nil if none).
func (d *Dir) Peers() []string {
	b, err := os.ReadFile(filepath.Join(d.Path, peersFile))
	if err != nil {
		return nil
	}
	var peers []string
	if json.Unmarshal(b, &peers) != nil {
		return nil
	}
	return peers
}

// SetPeers persists the gossip addresses of the other live members.
func (d *Dir) SetPeers(peers []string) error {
	b, err := json.Marshal(peers)
	if err != nil {
		return err
	}
	return d.writeFile(peersFile, b)
}

// writeFile replaces name atomically: a crash leaves the old or the new
// content, never a torn file.
func (d *Dir) writeFile(name string, b []byte) error {
	tmp, err := os.CreateTemp(d.Path, "."+name+".*")
	if err != nil {
		return fmt.Errorf("data dir %s: %w", d.Path, unwrapPath(err))
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(d.Path, name))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("data dir %s: write %s: %w", d.Path, name, unwrapPath(err))
	}
	if dir, err := os.Open(d.Path); err == nil {
		dir.Sync()
		dir.Close()
	}
	return nil
}

// unwrapPath drops the *PathError wrapper, whose path the caller already
// names, so messages stay on one line without repeating it.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
