package clock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// State is the whole gate as plain data, for a Raft snapshot. Workers are
// sorted by ID, so equal gates give equal States and equal bytes.
type State struct {
	Policy  Policy
	Floor   int64 // t_min (kept when the gate is empty)
	Totals  Stats
	Workers []WorkerState
}

// WorkerState is one worker in a State.
type WorkerState struct {
	ID      WorkerID
	Clock   int64
	Times   Timestamps
	NTimes  uint8 // 0..2 known timestamps; unknown ones are 0
	Grant   int64
	Waiting bool
	Stats   Stats
}

// State returns a copy of the gate's state.
func (g *Gate) State() State {
	s := State{Policy: g.pol, Floor: g.floor, Totals: g.totals, Workers: make([]WorkerState, 0, g.table.Len())}
	for _, id := range g.Workers() {
		i, _ := g.table.lookup(id)
		w := &g.ws[i]
		s.Workers = append(s.Workers, WorkerState{
			ID: id, Clock: g.table.clock(i), Times: w.times, NTimes: w.nTimes,
			Grant: w.grant, Waiting: w.waiting, Stats: w.stats,
		})
	}
	return s
}

// NewGateFromState rebuilds a gate that decides exactly as the one s was
// taken from. s is checked; a bad state is an error wrapping ErrBadState.
func NewGateFromState(s State) (*Gate, error) {
	g, err := NewGate(s.Policy)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadState, err)
	}
	bad := func(format string, args ...any) (*Gate, error) {
		return nil, fmt.Errorf("%w: %s", ErrBadState, fmt.Sprintf(format, args...))
	}
	if s.Floor < 0 {
		return bad("negative t_min %d", s.Floor)
	}
	for i, ws := range s.Workers {
		if i > 0 && s.Workers[i-1].ID >= ws.ID {
			return bad("workers not sorted or duplicated at %q", ws.ID)
		}
		if ws.Clock < s.Floor {
			return bad("worker %q clock %d below t_min %d", ws.ID, ws.Clock, s.Floor)
		}
		if ws.NTimes > 2 || (ws.NTimes < 2 && ws.Times.Previous != 0) || (ws.NTimes < 1 && ws.Times.Latest != 0) {
			return bad("worker %q has %d timestamps %+v", ws.ID, ws.NTimes, ws.Times)
		}
		if ws.NTimes == 2 && ws.Times.Latest < ws.Times.Previous {
			return bad("worker %q timestamps go back: %+v", ws.ID, ws.Times)
		}
		if ws.Grant < 0 {
			return bad("worker %q negative grant %d", ws.ID, ws.Grant)
		}
		j, err := g.add(ws.ID, ws.Clock)
		if err != nil {
			return bad("worker %q: %v", ws.ID, err)
		}
		g.ws[j] = worker{times: ws.Times, nTimes: ws.NTimes, grant: ws.Grant, stats: ws.Stats}
	}
	if g.table.Len() > 0 && g.table.Min() != s.Floor {
		return bad("t_min %d but the lowest clock is %d", s.Floor, g.table.Min())
	}
	g.floor, g.totals, g.swept = s.Floor, s.Totals, s.Floor+s.Policy.SL
	for _, ws := range s.Workers {
		if !ws.Waiting {
			continue
		}
		if s.Policy.Paradigm == ASP || ws.Clock <= g.swept {
			return bad("worker %q waits at gap %d under %s", ws.ID, ws.Clock-s.Floor, s.Policy)
		}
		j, _ := g.table.lookup(ws.ID)
		g.ws[j].waiting = true
		g.addWaiter(j)
	}
	return g, nil
}

// Encoding: the magic "dsspgate", a version byte, then signed varints
// (zig-zag) for every int64, uvarints for counts and counters, single bytes
// for enums and flags, and each WorkerID as a uvarint length plus bytes:
//
//	policy: paradigm u8, objective u8, s_L, r_max
//	floor, totals (5 uvarints), n workers
//	per worker: id, clock, ntimes u8, latest, previous, grant, waiting u8,
//	            stats (5 uvarints)
const (
	stateMagic   = "dsspgate"
	stateVersion = 1
	maxIDLen     = 1 << 10
)

// MarshalBinary encodes the gate's State; equal states give equal bytes.
func (g *Gate) MarshalBinary() ([]byte, error) {
	s := g.State()
	b := append([]byte(stateMagic), stateVersion, byte(s.Policy.Paradigm), byte(s.Policy.Objective))
	b = binary.AppendVarint(b, s.Policy.SL)
	b = binary.AppendVarint(b, s.Policy.RMax)
	b = binary.AppendVarint(b, s.Floor)
	b = appendStats(b, s.Totals)
	b = binary.AppendUvarint(b, uint64(len(s.Workers)))
	for _, w := range s.Workers {
		b = binary.AppendUvarint(b, uint64(len(w.ID)))
		b = append(b, w.ID...)
		b = binary.AppendVarint(b, w.Clock)
		b = append(b, w.NTimes)
		b = binary.AppendVarint(b, w.Times.Latest)
		b = binary.AppendVarint(b, w.Times.Previous)
		b = binary.AppendVarint(b, w.Grant)
		b = append(b, boolByte(w.Waiting))
		b = appendStats(b, w.Stats)
	}
	return b, nil
}

// UnmarshalBinary replaces the gate with the one encoded in data. On error
// the gate is unchanged.
func (g *Gate) UnmarshalBinary(data []byte) error {
	s, err := decodeState(data)
	if err != nil {
		return err
	}
	ng, err := NewGateFromState(s)
	if err != nil {
		return err
	}
	*g = *ng
	return nil
}

var errTruncated = errors.New("truncated")

type reader struct {
	b   []byte
	err error
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.err = errTruncated
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errTruncated
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errTruncated
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) stats() Stats {
	return Stats{Pushes: r.uvarint(), Waits: r.uvarint(), ControllerCalls: r.uvarint(), Grants: r.uvarint(), GrantedPushes: r.uvarint()}
}

func decodeState(data []byte) (State, error) {
	bad := func(format string, args ...any) (State, error) {
		return State{}, fmt.Errorf("%w: %s", ErrBadState, fmt.Sprintf(format, args...))
	}
	if len(data) < len(stateMagic)+1 || string(data[:len(stateMagic)]) != stateMagic {
		return bad("not a gate encoding")
	}
	if v := data[len(stateMagic)]; v != stateVersion {
		return bad("version %d, want %d", v, stateVersion)
	}
	r := &reader{b: data[len(stateMagic)+1:]}
	var s State
	s.Policy.Paradigm = Paradigm(r.byte())
	s.Policy.Objective = Objective(r.byte())
	s.Policy.SL = r.varint()
	s.Policy.RMax = r.varint()
	s.Floor = r.varint()
	s.Totals = r.stats()
	n := r.uvarint()
	// Each worker takes at least 13 bytes, so n is checked before allocating.
	if r.err == nil && n > uint64(len(r.b))/13 {
		return bad("%d workers in %d bytes", n, len(r.b))
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		var w WorkerState
		l := r.uvarint()
		if r.err == nil && (l > maxIDLen || l > uint64(len(r.b))) {
			return bad("worker id length %d", l)
		}
		if r.err == nil {
			w.ID = WorkerID(r.b[:l])
			r.b = r.b[l:]
		}
		w.Clock = r.varint()
		w.NTimes = r.byte()
		w.Times.Latest = r.varint()
		w.Times.Previous = r.varint()
		w.Grant = r.varint()
		switch r.byte() {
		case 0:
		case 1:
			w.Waiting = true
		default:
			return bad("worker %q waiting flag not 0 or 1", w.ID)
		}
		w.Stats = r.stats()
		s.Workers = append(s.Workers, w)
	}
	if r.err != nil {
		return bad("%v", r.err)
	}
	if len(r.b) != 0 {
		return bad("%d trailing bytes", len(r.b))
	}
	if slices.ContainsFunc(s.Workers, func(w WorkerState) bool { return w.ID == "" }) {
		return bad("empty worker id")
	}
	return s, nil
}

func appendStats(b []byte, s Stats) []byte {
	for _, v := range [...]uint64{s.Pushes, s.Waits, s.ControllerCalls, s.Grants, s.GrantedPushes} {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}
