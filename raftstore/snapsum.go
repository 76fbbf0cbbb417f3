package raftstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"
)

// A snapshot's metadata (raft's meta.json: its index, term and
// configuration) has a checksum of its own, as state.bin has its CRC in
// meta.json: meta.sum, beside them, holds the hex SHA-256 of the metadata's
// fields (metaSum), written into the snapshot's folder before raft
// renames it into place. Without it one digit of meta.json changed (its
// Index 85 → 95) made a replica skip entries for good, silently. A
// snapshot written before meta.sum existed has none and is not checked.
const metaSumFile = "meta.sum"

// fileMeta is raft's meta.json (its fileSnapshotMeta).
type fileMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

// metaSum is the SHA-256 of m's fields but Peers (derived from the
// configuration for version-0 readers) and the CRC (which state.bin
// checks), as hex.
func metaSum(m raft.SnapshotMeta) string {
	m.Peers = nil
	b, _ := json.Marshal(m) // a struct of plain fields always encodes
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// sumStore is raft's file snapshot store with meta.sum written and checked.
type sumStore struct {
	*raft.FileSnapshotStore
	dir string // the store's snapshots folder
}

func (s *sumStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &sumSink{SnapshotSink: sink, dir: filepath.Join(s.dir, sink.ID()+".tmp"),
		meta: raft.SnapshotMeta{Version: version, ID: sink.ID(), Index: index, Term: term, Configuration: configuration, ConfigurationIndex: configurationIndex}}, nil
}

// Open checks the snapshot's meta.sum before raft's store opens it (and
// checks state.bin's CRC).
func (s *sumStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	if err := checkMetaSum(filepath.Join(s.dir, id)); err != nil {
		return nil, nil, err
	}
	return s.FileSnapshotStore.Open(id)
}

// sumSink counts the bytes of state.bin and writes meta.sum before the
// sink closes (raft then writes meta.json and renames the folder).
type sumSink struct {
	raft.SnapshotSink
	dir    string
	meta   raft.SnapshotMeta
	closed bool // raft closes a sink again after the FSM's Persist did
}

func (s *sumSink) Write(b []byte) (int, error) {
	n, err := s.SnapshotSink.Write(b)
	s.meta.Size += int64(n)
	return n, err
}

func (s *sumSink) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if err := writeSynced(filepath.Join(s.dir, metaSumFile), []byte(metaSum(s.meta)+"\n")); err != nil {
		return errors.Join(fmt.Errorf("raftstore: write %s: %w", metaSumFile, err), s.SnapshotSink.Cancel())
	}
	return s.SnapshotSink.Close()
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// readMeta reads the snapshot folder dir's meta.json.
func readMeta(dir string) (fileMeta, error) {
	var m fileMeta
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("meta.json: %w", err)
	}
	return m, nil
}

// checkMetaSum checks the snapshot folder dir's meta.json against its
// meta.sum (absent: a snapshot of an earlier build, not checked).
func checkMetaSum(dir string) error {
	want, err := os.ReadFile(filepath.Join(dir, metaSumFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	m, err := readMeta(dir)
	if err != nil {
		return err
	}
	if got := metaSum(m.SnapshotMeta); got != strings.TrimSpace(string(want)) {
		return fmt.Errorf("%s does not match its %s (index %d, term %d as it reads now): the metadata was changed or damaged",
			filepath.Join(dir, "meta.json"), metaSumFile, m.Index, m.Term)
	}
	return nil
}

// checkNewestSnapshot checks the snapshot raft restores first, the newest
// in the shard folder dir: its meta.sum, and state.bin's size and CRC
// against meta.json, as raft's store does when it opens it; raft falls
// back to an older snapshot when the newest fails, whose entries the log
// no longer holds. It returns the damaged file and the problem, or "".
func checkNewestSnapshot(dir string) (path, problem string) {
	snaps := filepath.Join(dir, "snapshots")
	entries, err := os.ReadDir(snaps)
	if err != nil {
		return "", ""
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return "", ""
	}
	// raft names a snapshot term-index-millis; its store sorts by term,
	// then index, then id: read each meta and take the greatest. A folder
	// whose meta.json cannot be read is one raft's store skips: an older
	// snapshot being reaped when the node was killed (raft removes the
	// folder's files one by one) is left so, and skipped here too; one
	// whose name says it is newer than every readable one is the snapshot
	// raft would restore, damaged.
	var newest string
	var best fileMeta
	type unreadable struct {
		name string
		err  error
	}
	var bad []unreadable
	for _, n := range names {
		m, err := readMeta(filepath.Join(snaps, n))
		if err != nil {
			bad = append(bad, unreadable{n, err})
			continue
		}
		if newest == "" || m.Term > best.Term || m.Term == best.Term && (m.Index > best.Index || m.Index == best.Index && n > newest) {
			newest, best = n, m
		}
	}
	for _, u := range bad {
		term, index, ok := snapshotName(u.name)
		if newest == "" || !ok || term > best.Term || term == best.Term && index >= best.Index {
			return filepath.Join(snaps, u.name, "meta.json"), "is unreadable: " + u.err.Error()
		}
	}
	if newest == "" {
		return "", ""
	}
	sd := filepath.Join(snaps, newest)
	if err := checkMetaSum(sd); err != nil {
		return filepath.Join(sd, "meta.json"), "does not match the sum written with it (" + metaSumFile + ")"
	}
	f, err := os.Open(filepath.Join(sd, "state.bin"))
	if err != nil {
		return filepath.Join(sd, "state.bin"), "is unreadable: " + err.Error()
	}
	defer f.Close()
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	n, err := io.Copy(h, f)
	switch {
	case err != nil:
		return filepath.Join(sd, "state.bin"), "is unreadable: " + err.Error()
	case n != best.Size:
		return filepath.Join(sd, "state.bin"), fmt.Sprintf("is %d bytes, its meta.json says %d", n, best.Size)
	case !bytes.Equal(h.Sum(nil), best.CRC):
		return filepath.Join(sd, "state.bin"), "fails its checksum (the CRC-64 in its meta.json)"
	}
	return "", ""
}

// snapshotName reads the term and index from a snapshot folder's name,
// term-index-millis as raft's file store writes it.
func snapshotName(name string) (term, index uint64, ok bool) {
	parts := strings.Split(name, "-")
	if len(parts) != 3 {
		return 0, 0, false
	}
	t, err1 := strconv.ParseUint(parts[0], 10, 64)
	i, err2 := strconv.ParseUint(parts[1], 10, 64)
	return t, i, err1 == nil && err2 == nil
}
