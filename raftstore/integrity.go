package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/bbolt"
)

// DamagedError: a shard folder's log database is missing, empty or
// damaged, so its replica cannot start. Starting it with an empty log
// instead would forget the term and vote the replica persisted and the
// entries it acknowledged: it could vote twice in one term, count towards
// a quorum for entries it no longer holds, and with a snapshot on disk
// elect itself and roll the shard back to that snapshot. The remedy is to
// remove Dir: the node then has no state for the shard and, where
// placement assigns it the shard, joins it as a fresh replica that the
// leader catches up (a snapshot, then the log).
//
// The newest snapshot is checked too (Snapshot set): its meta.json
// against its meta.sum, and state.bin's size and CRC against meta.json.
// raft would fall back to an older snapshot, whose entries the log no
// longer holds; the remedy is the same.
type DamagedError struct {
	Shard uint32
	Path  string // the log database, or the snapshot's file
	Dir   string // the shard folder to remove
	// Problem says what is wrong: "is missing", "is empty", "is damaged: …".
	Problem  string
	Snapshot bool // Path is a file of the newest snapshot
}

func (e *DamagedError) Error() string {
	what, why := "log store", "starting the replica with an empty log would forget its term and vote and could roll the shard back"
	if e.Snapshot {
		what, why = "snapshot file", "the replica cannot restore its state from it, and its log no longer holds the entries an older snapshot would need"
	}
	return fmt.Sprintf("raftstore: shard %d: %s %s %s; %s; "+
		"remove %s to have this node rejoin the shard as a fresh replica that catches up from its peers (only while another replica still holds the shard)",
		e.Shard, what, e.Path, e.Problem, why, e.Dir)
}

// CheckShards checks the log database of every shard folder under
// dataDir (<dataDir>/shards/<id>) as Open does, without opening any, and
// returns a *DamagedError for each missing, empty or damaged one (joined
// with errors.Join when several are). A node calls it before it starts
// any replica, so that one damaged store refuses the node's start rather
// than only that shard's replica once the node already serves the others.
// Folders whose names are not shard ids (a staging folder) are skipped; a
// missing shards folder is no damage (a node that never hosted a shard).
func CheckShards(dataDir string, timeout time.Duration) error {
	root := filepath.Join(dataDir, "shards")
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("raftstore: %w", err)
	}
	var errs []error
	for _, e := range entries {
		id, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || !e.IsDir() || strconv.FormatUint(id, 10) != e.Name() {
			continue
		}
		if err := checkShardDir(uint32(id), filepath.Join(root, e.Name()), timeout); err != nil {
			var de *DamagedError
			if !errors.As(err, &de) {
				err = fmt.Errorf("raftstore: shard %d: %w", id, err)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// stagingSuffix names the folder a new shard folder is built in before it
// is renamed into place (createShardDir).
const stagingSuffix = ".creating"

// createShardDir creates dir with an initialised log database in it, so
// that a shard folder never exists without its raft.db: the database is
// created in dir+stagingSuffix (a leftover of a crash is removed first),
// fsynced with its folder, and the folder renamed to dir and the parent
// fsynced. A shard folder without raft.db therefore lost it.
func createShardDir(dir string, opts *bbolt.Options) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return err
	}
	staging := dir + stagingSuffix
	if err := os.RemoveAll(staging); err != nil {
		return err
	}
	if err := os.Mkdir(staging, 0o700); err != nil {
		return err
	}
	db, err := openBoltLog(filepath.Join(staging, "raft.db"), opts)
	if err == nil {
		err = db.Close()
	}
	if err == nil {
		err = syncFile(staging)
	}
	if err == nil {
		err = os.Rename(staging, dir)
	}
	if err == nil {
		err = syncFile(parent)
	}
	if err != nil {
		os.RemoveAll(staging)
	}
	return err
}

// checkShardDir reports a *DamagedError when the log database of the
// shard folder dir is missing, empty or fails checkBolt, or its newest
// snapshot fails checkNewestSnapshot. It holds bbolt's
// shared file lock while it reads (waiting at most timeout, as Open does),
// so a database another process writes is reported as held, not damaged.
func checkShardDir(shard uint32, dir string, timeout time.Duration) error {
	path := filepath.Join(dir, "raft.db")
	damaged := func(problem string) error {
		return &DamagedError{Shard: shard, Path: path, Dir: dir, Problem: problem}
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if snaps, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "meta.json")); len(snaps) > 0 {
			return damaged(fmt.Sprintf("is missing, and the shard's snapshots are there (%d in %s)", len(snaps), filepath.Join(dir, "snapshots")))
		}
		return damaged("is missing from the shard folder")
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return damaged("is not a regular file")
	case fi.Size() == 0:
		return damaged("is empty")
	}
	// A read-only open takes the shared lock and reads only the meta
	// pages; unlike a writable one it does not walk the tree to rebuild the
	// freelist, where damage faults the process.
	ro, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: timeout})
	if errors.Is(err, bbolt.ErrTimeout) {
		return fmt.Errorf("open log %s: %w: another process holds it open (waited %v)", path, err, timeout)
	}
	if err == nil {
		defer ro.Close()
	}
	f, ferr := os.Open(path)
	if ferr != nil {
		return errors.Join(ferr, err)
	}
	defer f.Close()
	if cerr := checkBolt(f, fi.Size()); cerr != nil {
		return damaged("is damaged: " + cerr.Error())
	}
	if err != nil {
		return damaged("is damaged: " + err.Error())
	}
	if p, problem := checkNewestSnapshot(dir); p != "" {
		return &DamagedError{Shard: shard, Path: p, Dir: dir, Problem: problem, Snapshot: true}
	}
	return nil
}

// bbolt's on-disk format (go.etcd.io/bbolt v1.3, native byte order):
//
//	page header (16 bytes): id u64, flags u16, count u16, overflow u32
//	meta (after the header of pages 0 and 1): magic u32, version u32,
//	    pageSize u32, flags u32, root bucket (root u64, sequence u64),
//	    freelist u64, pgid u64 (high water mark), txid u64, checksum u64
//	    (FNV-64a of the 56 bytes before it)
//	branch element (16 bytes): pos u32, ksize u32, pgid u64
//	leaf element (16 bytes): flags u32, pos u32, ksize u32, vsize u32
//	    (key at element + pos, value after it; flags 1: a bucket, whose
//	    value is root u64, sequence u64 and, with root 0, an inline page)
//	freelist page: count page ids (u64); count 0xFFFF: the first u64 is it
const (
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	pageHeaderSize   = 16
	elementSize      = 16
	branchPageFlag   = 0x01
	leafPageFlag     = 0x02
	freelistPageFlag = 0x10
	bucketLeafFlag   = 0x01
	noFreelist       = ^uint64(0)
	// maxTreeDepth bounds the walk through nested buckets' trees; a
	// log's is 4 or 5 deep.
	maxTreeDepth = 64
)

var ne = binary.NativeEndian

type boltMeta struct {
	pageSize                  uint32
	root, freelist, hwm, txid uint64
	valid                     bool
}

func parseMeta(b []byte) boltMeta {
	if len(b) < pageHeaderSize+64 {
		return boltMeta{}
	}
	m := b[pageHeaderSize:]
	h := fnv.New64a()
	h.Write(m[:56])
	sum := ne.Uint64(m[56:])
	return boltMeta{
		pageSize: ne.Uint32(m[8:]),
		root:     ne.Uint64(m[16:]),
		freelist: ne.Uint64(m[32:]),
		hwm:      ne.Uint64(m[40:]),
		txid:     ne.Uint64(m[48:]),
		valid:    ne.Uint32(m[0:]) == boltMagic && ne.Uint32(m[4:]) == boltVersion && (sum == 0 || sum == h.Sum64()),
	}
}

// checkBolt checks the structure of the bbolt database f of size bytes
// before bbolt maps it: a valid meta page (the one bbolt will use), a file
// as long as that meta page says, and a tree every page of which lies
// below the high water mark, carries its own id and a branch or leaf type,
// is reached once, and holds elements inside the page; the buckets "logs"
// and "conf" exist. It reads the pages with pread, so damage is an error,
// never a fault, and reads of each page what the walk needs (not the
// entries' bodies). bbolt keeps no checksum of data pages: damage inside
// an entry's bytes passes here and fails the entry's own checksum when it
// is read (checkEntry).
func checkBolt(f io.ReaderAt, size int64) error {
	first := make([]byte, 4096)
	if _, err := f.ReadAt(first, 0); err != nil {
		return fmt.Errorf("no valid meta page (the file is %d bytes)", size)
	}
	m0 := parseMeta(first)
	ps := int64(os.Getpagesize())
	if m0.valid {
		ps = int64(m0.pageSize)
	}
	var m1 boltMeta
	if ps >= 1024 && ps <= 1<<20 {
		second := make([]byte, pageHeaderSize+64)
		if _, err := f.ReadAt(second, ps); err == nil {
			m1 = parseMeta(second)
		}
	}
	m := m0
	if m1.txid > m0.txid && m1.valid || !m0.valid {
		m = m1
	}
	if !m.valid {
		return errors.New("no valid meta page")
	}
	if int64(m.pageSize) != ps {
		return fmt.Errorf("meta pages disagree on the page size (%d, %d)", ps, m.pageSize)
	}
	if m.hwm < 2 || m.hwm > uint64(size/ps) {
		return fmt.Errorf("truncated: the file is %d bytes, its meta page (transaction %d) says %d pages of %d bytes", size, m.txid, m.hwm, ps)
	}
	c := &boltChecker{f: f, ps: ps, hwm: m.hwm, seen: make([]bool, m.hwm)}
	if m.freelist != noFreelist {
		if err := c.checkFreelist(m.freelist); err != nil {
			return err
		}
	}
	buckets, err := c.walk(m.root, 0, true)
	if err != nil {
		return err
	}
	for _, name := range []string{string(bucketLogs), string(bucketConf)} {
		if !buckets[name] {
			return fmt.Errorf("no %q bucket", name)
		}
	}
	return nil
}

type boltChecker struct {
	f    io.ReaderAt
	ps   int64
	hwm  uint64
	seen []bool
	// bufs holds one page buffer per depth of the walk: a page's buffer
	// stays valid while the walk descends from it.
	bufs [][]byte
}

// pageView is one page (with its overflow pages) being checked.
type pageView struct {
	c     *boltChecker
	id    uint64
	limit uint64 // bytes in the page and its overflow pages
	head  []byte // the first page
	flags uint16
	count uint64
}

// in reports whether n bytes at off lie inside the page.
func (p *pageView) in(off, n uint64) error {
	if off > p.limit || n > p.limit-off {
		return fmt.Errorf("page %d: element at %d+%d past its %d bytes", p.id, off, n, p.limit)
	}
	return nil
}

// at reads n bytes at off inside the page.
func (p *pageView) at(off, n uint64) ([]byte, error) {
	if err := p.in(off, n); err != nil {
		return nil, err
	}
	if off+n <= uint64(len(p.head)) {
		return p.head[off : off+n], nil
	}
	b := make([]byte, n)
	if _, err := p.c.f.ReadAt(b, int64(p.id)*p.c.ps+int64(off)); err != nil {
		return nil, fmt.Errorf("page %d: %w", p.id, err)
	}
	return b, nil
}

// page reads the first page of id into the buffer of depth and marks id
// and its overflow pages seen.
func (c *boltChecker) page(id uint64, depth int) (*pageView, error) {
	if id < 2 || id >= c.hwm {
		return nil, fmt.Errorf("page %d: outside the file's %d pages", id, c.hwm)
	}
	for len(c.bufs) <= depth {
		c.bufs = append(c.bufs, make([]byte, c.ps))
	}
	buf := c.bufs[depth]
	if _, err := c.f.ReadAt(buf, int64(id)*c.ps); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	if got := ne.Uint64(buf); got != id {
		return nil, fmt.Errorf("page %d: its header says page %d", id, got)
	}
	overflow := uint64(ne.Uint32(buf[12:]))
	if id+overflow >= c.hwm {
		return nil, fmt.Errorf("page %d: %d overflow pages run past the file's %d pages", id, overflow, c.hwm)
	}
	for p := id; p <= id+overflow; p++ {
		if c.seen[p] {
			return nil, fmt.Errorf("page %d: reached twice", p)
		}
		c.seen[p] = true
	}
	return &pageView{c: c, id: id, limit: (overflow + 1) * uint64(c.ps), head: buf,
		flags: ne.Uint16(buf[8:]), count: uint64(ne.Uint16(buf[10:]))}, nil
}

func (c *boltChecker) checkFreelist(id uint64) error {
	p, err := c.page(id, 0)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	if p.flags&freelistPageFlag == 0 {
		return fmt.Errorf("freelist: page %d has type %#x", id, p.flags)
	}
	off := uint64(pageHeaderSize)
	n := p.count
	if n == 0xFFFF {
		b, err := p.at(off, 8)
		if err != nil {
			return err
		}
		n, off = ne.Uint64(b), off+8
	}
	if n > c.hwm {
		return fmt.Errorf("freelist: page %d lists %d pages of %d", id, n, c.hwm)
	}
	ids, err := p.at(off, n*8)
	if err != nil {
		return err
	}
	for i := range n {
		if p := ne.Uint64(ids[i*8:]); p < 2 || p >= c.hwm {
			return fmt.Errorf("freelist: page %d lists page %d of %d", id, p, c.hwm)
		}
	}
	return nil
}

// checkInline checks the page of an inline bucket (element i of page
// id): a leaf whose elements, none a bucket, lie inside it.
func checkInline(id, i uint64, p []byte) error {
	if len(p) < pageHeaderSize || ne.Uint16(p[8:])&leafPageFlag == 0 {
		return fmt.Errorf("page %d: element %d: not an inline bucket", id, i)
	}
	count := uint64(ne.Uint16(p[10:]))
	if pageHeaderSize+count*elementSize > uint64(len(p)) {
		return fmt.Errorf("page %d: element %d: inline bucket of %d elements in %d bytes", id, i, count, len(p))
	}
	for j := range count {
		e := p[pageHeaderSize+j*elementSize:]
		if ne.Uint32(e) != 0 || pageHeaderSize+j*elementSize+uint64(ne.Uint32(e[4:]))+uint64(ne.Uint32(e[8:]))+uint64(ne.Uint32(e[12:])) > uint64(len(p)) {
			return fmt.Errorf("page %d: element %d: inline bucket element %d out of bounds", id, i, j)
		}
	}
	return nil
}

// walk checks the tree of one bucket rooted at page id; top: it is the
// root bucket, whose bucket names it returns.
func (c *boltChecker) walk(id uint64, depth int, top bool) (map[string]bool, error) {
	if depth > maxTreeDepth {
		return nil, fmt.Errorf("page %d: the tree is deeper than %d", id, maxTreeDepth)
	}
	p, err := c.page(id, depth)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	count := p.count
	elems, err := p.at(pageHeaderSize, count*elementSize)
	if err != nil {
		return nil, err
	}
	switch {
	case p.flags&branchPageFlag != 0:
		if count == 0 {
			return nil, fmt.Errorf("page %d: an empty branch", id)
		}
		for i := range count {
			e := elems[i*elementSize:]
			if err := p.in(pageHeaderSize+i*elementSize+uint64(ne.Uint32(e)), uint64(ne.Uint32(e[4:]))); err != nil {
				return nil, err
			}
			sub, err := c.walk(ne.Uint64(e[8:]), depth+1, top)
			if err != nil {
				return nil, err
			}
			for k := range sub {
				names[k] = true
			}
		}
	case p.flags&leafPageFlag != 0:
		for i := range count {
			e := elems[i*elementSize:]
			eflags, pos, ksize, vsize := ne.Uint32(e), uint64(ne.Uint32(e[4:])), uint64(ne.Uint32(e[8:])), uint64(ne.Uint32(e[12:]))
			if eflags&^bucketLeafFlag != 0 {
				return nil, fmt.Errorf("page %d: element %d has flags %#x", id, i, eflags)
			}
			koff := pageHeaderSize + i*elementSize + pos
			if err := p.in(koff, ksize+vsize); err != nil {
				return nil, err
			}
			if eflags&bucketLeafFlag == 0 {
				continue
			}
			if top {
				k, err := p.at(koff, ksize)
				if err != nil {
					return nil, err
				}
				names[string(k)] = true
			}
			if vsize < 16 {
				return nil, fmt.Errorf("page %d: bucket value of %d bytes", id, vsize)
			}
			v, err := p.at(koff+ksize, 16)
			if err != nil {
				return nil, err
			}
			if root := ne.Uint64(v); root != 0 {
				if _, err := c.walk(root, depth+1, false); err != nil {
					return nil, err
				}
			} else {
				inline, err := p.at(koff+ksize+16, vsize-16)
				if err == nil {
					err = checkInline(id, i, inline)
				}
				if err != nil {
					return nil, err
				}
			}
		}
	default:
		return nil, fmt.Errorf("page %d: type %#x where a branch or leaf belongs", id, p.flags)
	}
	return names, nil
}
