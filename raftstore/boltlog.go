package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync/atomic"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"
)

// boltLog is the log and stable store of one shard in one bbolt file. Its
// layout and encoding are hashicorp/raft-boltdb v2's, which this package
// used before:
//
//	bucket "logs": key = index as 8 bytes big-endian, value = msgpack of raft.Log
//	               and its checksum trailer (appendSum)
//	bucket "conf": the stable store's keys and values
//
// except for the trailer, which raft-boltdb's decoder ignores, and that an
// entry of bigEntry bytes or more is stored as the value
// "e" of a bucket under its index (see bigEntry); raft-boltdb's files open
// here, files with such entries do not open with raft-boltdb. It also
// differs in what it keeps in memory:
//   - bbolt maps the whole file and every entry read back (a follower applying
//     an entry the cache no longer holds, a leader catching up a follower)
//     faults its pages into the process, where they stay resident and count
//     in its RSS until the kernel needs them: with entries of tens of
//     megabytes that is the whole file. After such a read the store drops
//     the mapping's pages again (dropMapped: madvise(MADV_DONTNEED) on a
//     shared read-only file mapping, which only unmaps; the data stays in the
//     page cache and on disk), inside the read transaction, which holds
//     bbolt's lock against a remap. It does so once at least unmapEvery bytes
//     were read or appended since the last time, not after every call: the
//     call walks the whole mapping's page tables and the next transaction
//     faults bbolt's meta and branch pages back in, which cost a follower of
//     a small model more CPU than the appends themselves (20 % of a node's
//     profile); an entry of unmapAlone bytes or more is unmapped after its
//     own read or append, and a DeleteRange unmaps what freeing the
//     entries' pages touched. A touched page maps its whole folio of the
//     page cache (up to 2 MiB on ext4), so a few folios stay mapped beyond
//     the bytes counted: 13–16 MB per file of a 100 MB model's log before
//     the large entries and the deletes unmapped.
//   - the file grows in steps of boltAllocStep instead of bbolt's 16 MiB (and
//     powers of two below it), so it stays close to the largest log it held.
//   - an entry is encoded into one buffer of its size, not a doubling one.
//
// All methods are safe for concurrent use (bbolt serializes writers).
type boltLog struct {
	db *bbolt.DB
	// touched counts the bytes read or appended since the mapping was last
	// unmapped (see unmapEvery).
	touched atomic.Int64
	// unmaps counts dropMapped calls, for tests.
	unmaps atomic.Int64
	// damaged, if set, is told of an entry whose checksum fails (see
	// GetLog).
	damaged atomic.Pointer[func(index uint64, err error)]
}

const boltAllocStep = 1 << 20

// unmapEvery bounds how many bytes of entries may be read or appended
// between two unmappings of the file; an entry of unmapAlone bytes or more
// is unmapped after its own read or append. Each page touched maps its
// whole folio of the page cache (up to 2 MiB on ext4), so what stays
// resident is a few folios more than the bytes counted.
const (
	unmapEvery = 4 << 20
	unmapAlone = 1 << 20
)

// bigEntry: an encoded entry at least this large is stored as the one
// value (key entryKey) of a bucket of its own under its index, so that it
// sits alone in its pages. bbolt keeps up to four values in one leaf however
// large they are and rewrites the leaf with all of them when a key is added
// to it, so as plain values each appended entry rewrote up to three before
// it: 20 appends of 1 MiB wrote 110 MiB, as buckets they write 20.
const bigEntry = 16 << 10

var entryKey = []byte("e")

var (
	bucketLogs = []byte("logs")
	bucketConf = []byte("conf")
	// errKeyNotFound's text is what raft tests for on a missing stable key.
	errKeyNotFound = errors.New("not found")
)

var (
	_ raft.LogStore    = (*boltLog)(nil)
	_ raft.StableStore = (*boltLog)(nil)
)

func openBoltLog(path string, opts *bbolt.Options) (*boltLog, error) {
	db, err := bbolt.Open(path, 0o600, opts)
	if err != nil {
		return nil, err
	}
	db.AllocSize = boltAllocStep
	err = db.Update(func(tx *bbolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketLogs); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketConf)
		return err
	})
	if err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return &boltLog{db: db}, nil
}

func (b *boltLog) Close() error { return b.db.Close() }

func key(i uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), i) }

func (b *boltLog) FirstIndex() (uint64, error) { return b.edge(true) }
func (b *boltLog) LastIndex() (uint64, error)  { return b.edge(false) }

func (b *boltLog) edge(first bool) (uint64, error) {
	var idx uint64
	err := b.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketLogs).Cursor()
		k, _ := c.Last()
		if first {
			k, _ = c.First()
		}
		if k != nil {
			idx = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return idx, err
}

func (b *boltLog) GetLog(idx uint64, log *raft.Log) error {
	var bad error
	err := b.db.View(func(tx *bbolt.Tx) error {
		v := getEntry(tx.Bucket(bucketLogs), key(idx))
		if v == nil {
			return raft.ErrLogNotFound
		}
		body, err := checkEntry(v)
		// Without MaxInitLen the codec builds a long byte string 256 KiB
		// at a time, copying it whole at each step: a 3 MB entry cost
		// 20 MB of allocation and copying. The value is in memory, so
		// no length it holds can exceed it.
		h := &codec.MsgpackHandle{}
		h.MaxInitLen = len(body)
		derr := codec.NewDecoderBytes(body, h).Decode(log)
		// The decoder copied the value; the pages the read faulted in may go.
		if b.touch(len(v)) {
			b.unmap(tx)
		}
		if err != nil {
			// Damaged: nothing of it is handed on (see damagedEntry).
			bad = err
			*log = raft.Log{Index: idx, Term: log.Term, Type: raft.LogNoop}
			return nil
		}
		return derr
	})
	if bad != nil {
		if f := b.damaged.Load(); f != nil {
			(*f)(idx, bad)
		}
	}
	return err
}

// An entry's value ends with a checksum trailer: entrySumMagic, then the
// CRC-32C (Castagnoli) of the encoded entry before it, big-endian. bbolt
// keeps no checksum of data pages, so without it a flipped bit inside an
// entry's bytes decodes as another entry. Values without the trailer
// (written before it existed) are not checked.
var entrySumMagic = []byte("dsum")

const entrySumLen = 8

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendSum appends the checksum trailer of v.
func appendSum(v []byte) []byte {
	v = append(v, entrySumMagic...)
	return binary.BigEndian.AppendUint32(v, crc32.Checksum(v[:len(v)-len(entrySumMagic)], castagnoli))
}

// checkEntry returns the encoded entry of the value v, and an error when
// its checksum fails: a damaged entry. GetLog then returns a no-op entry
// of the same index in its place, so the damaged bytes reach neither this
// replica's state machine nor a follower, and tells the store's damage
// hook (Stores.SetDamaged), on which the shard's replica stops at once
// (it diverged) and its node rebuilds it from its peers (docs/design.md,
// "Replicas agree"). An error would make raft stop the process instead.
func checkEntry(v []byte) ([]byte, error) {
	n := len(v)
	if n < entrySumLen || !bytes.Equal(v[n-entrySumLen:n-4], entrySumMagic) {
		return v, nil
	}
	body := v[:n-entrySumLen]
	if want, got := binary.BigEndian.Uint32(v[n-4:]), crc32.Checksum(body, castagnoli); want != got {
		return body, fmt.Errorf("checksum %08x, the entry's bytes give %08x", want, got)
	}
	return body, nil
}

// touch counts n bytes of entries read or appended and reports whether
// the mapping should be unmapped now: after an entry of unmapAlone bytes
// or more, or once unmapEvery bytes of smaller ones added up.
func (b *boltLog) touch(n int) bool {
	return n >= unmapAlone || b.touched.Add(int64(n)) >= unmapEvery
}

// unmapNow unmaps in a read transaction of its own.
func (b *boltLog) unmapNow() {
	b.db.View(func(tx *bbolt.Tx) error { b.unmap(tx); return nil })
}

// unmap drops the file's pages from this process; tx must be open.
func (b *boltLog) unmap(tx *bbolt.Tx) {
	b.touched.Store(0)
	b.unmaps.Add(1)
	dropMapped(b.db, tx)
}

// getEntry is the encoded entry at k: a value of its own (raft-boltdb's
// layout, and a small entry here) or the value entryKey of the bucket k.
func getEntry(logs *bbolt.Bucket, k []byte) []byte {
	if v := logs.Get(k); v != nil {
		return v
	}
	if sub := logs.Bucket(k); sub != nil {
		return sub.Get(entryKey)
	}
	return nil
}

func (b *boltLog) StoreLog(log *raft.Log) error { return b.StoreLogs([]*raft.Log{log}) }

func (b *boltLog) StoreLogs(logs []*raft.Log) error {
	written := 0
	defer func() {
		if b.touch(written) {
			b.unmapNow()
		}
	}()
	return b.db.Update(func(tx *bbolt.Tx) error {
		bk := tx.Bucket(bucketLogs)
		for _, l := range logs {
			v, err := encodeLog(l)
			if err != nil {
				return err
			}
			written += len(v)
			k := key(l.Index)
			// A rewritten index (a conflicting suffix) replaces either form.
			if bk.Bucket(k) != nil {
				if err := bk.DeleteBucket(k); err != nil {
					return err
				}
			}
			if len(v) < bigEntry {
				if err := bk.Put(k, v); err != nil {
					return err
				}
				continue
			}
			sub, err := bk.CreateBucket(k)
			if errors.Is(err, bbolt.ErrIncompatibleValue) {
				// A small entry at this index: replace it.
				if err = bk.Delete(k); err == nil {
					sub, err = bk.CreateBucket(k)
				}
			}
			if err != nil {
				return err
			}
			if err := sub.Put(entryKey, v); err != nil {
				return err
			}
		}
		return nil
	})
}

// encodeLog is raft-boltdb's encoding of a log entry (its time in the
// older, non-builtin format), into a buffer sized for it, followed by
// its checksum trailer (appendSum).
func encodeLog(l *raft.Log) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, len(l.Data)+len(l.Extensions)+128+entrySumLen))
	err := codec.NewEncoder(buf, &codec.MsgpackHandle{BasicHandle: codec.BasicHandle{TimeNotBuiltin: true}}).Encode(l)
	return appendSum(buf.Bytes()), err
}

// DeleteRange deletes the entries in [min, max] and then unmaps the file:
// freeing an entry's bucket reads its first page, which maps that page's
// whole folio (up to 2 MiB), so a compaction of a large model's log left
// megabytes per entry deleted resident.
func (b *boltLog) DeleteRange(min, max uint64) error {
	defer b.unmapNow()
	return b.db.Update(func(tx *bbolt.Tx) error {
		logs := tx.Bucket(bucketLogs)
		var subs [][]byte
		c := logs.Cursor()
		for k, v := c.Seek(key(min)); k != nil && binary.BigEndian.Uint64(k) <= max; k, v = c.Next() {
			if v == nil { // a bucket: deleted after the walk
				subs = append(subs, bytes.Clone(k))
				continue
			}
			if err := c.Delete(); err != nil {
				return err
			}
		}
		for _, k := range subs {
			if err := logs.DeleteBucket(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func (b *boltLog) Set(k, v []byte) error {
	return b.db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketConf).Put(k, v) })
}

func (b *boltLog) Get(k []byte) ([]byte, error) {
	var out []byte
	err := b.db.View(func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketConf).Get(k)
		if v == nil {
			return errKeyNotFound
		}
		out = bytes.Clone(v)
		return nil
	})
	return out, err
}

func (b *boltLog) SetUint64(k []byte, v uint64) error { return b.Set(k, key(v)) }

func (b *boltLog) GetUint64(k []byte) (uint64, error) {
	v, err := b.Get(k)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, errors.New("raftstore: stable value is not 8 bytes")
	}
	return binary.BigEndian.Uint64(v), nil
}
