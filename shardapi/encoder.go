package shardapi

import "fmt"

// Encoder encodes a slice of n values that arrive in pieces, in any
// order, each value once (cudaops.Model.GradientTo hands a gradient out
// as backpropagation forms it, the last layer first), into one buffer of
// the encoding's size that it keeps from slice to slice. A worker of a
// 100 MB model under int8 then holds its gradient's 25 MB encoding, not
// the 100 MB of float32 it would otherwise encode from.
//
// The encoding is Precision.AppendFeedback's of the whole slice, byte for
// byte: fp32 and bf16 values are encoded where they land; an int8 block
// is encoded once all its values are in, straight from the piece when
// one piece holds it whole, else from a copy that gathers its values (at
// most two such blocks a piece). Not safe for concurrent use.
type Encoder struct {
	p     Precision
	n     int
	out   []byte
	resid []byte
	left  int                // values still to come
	part  map[int]*gathering // int8: the blocks given in part so far, by index
	spare []*gathering
	err   error
}

// gathering is an int8 block whose values arrive in more than one piece.
type gathering struct {
	v    [int8Block]float32
	have int
}

// NewEncoder returns an encoder of n values in p.
func NewEncoder(p Precision, n int) *Encoder {
	return &Encoder{p: p, n: n, out: make([]byte, p.Bytes(n)), part: map[int]*gathering{}}
}

// Start begins a new slice; the last one's bytes are overwritten as the
// new values arrive. resid is the int8 error-feedback residual
// ([Precision.NewResidual], [Client.Residual]) that AppendFeedback would
// take, nil for none; it is updated block by block as blocks complete.
func (e *Encoder) Start(resid []byte) {
	e.resid, e.left, e.err = resid, e.n, nil
	for b, g := range e.part {
		e.spare = append(e.spare, g)
		delete(e.part, b)
	}
}

// Put encodes values off … off+len(v)−1 of the slice; v is only read. A
// piece outside the slice is ignored and fails Finish.
func (e *Encoder) Put(off int, v []float32) {
	if off < 0 || off+len(v) > e.n {
		e.err = fmt.Errorf("shardapi: encoder of %d values given [%d, %d)", e.n, off, off+len(v))
		return
	}
	e.left -= len(v)
	if !e.p.feedback() {
		size := e.p.Bytes(1)
		e.p.encode(e.out[off*size:(off+len(v))*size], v)
		return
	}
	end := off + len(v)
	for b := off / int8Block; b*int8Block < end; {
		lo, hi := b*int8Block, min((b+1)*int8Block, e.n)
		if lo >= off && hi <= end {
			// A run of whole blocks, encoded in one call.
			last := b
			for (last+1)*int8Block < end && min((last+2)*int8Block, e.n) <= end {
				last++
			}
			hi = min((last+1)*int8Block, e.n)
			e.encode(b, v[lo-off:hi-off])
			b = last + 1
			continue
		}
		e.gather(b, lo, hi, max(lo, off), min(hi, end), v[max(lo, off)-off:min(hi, end)-off])
		b++
	}
}

// gather copies the values from … to−1 of block b (lo … hi−1) into the
// block's gathering and encodes the block once that holds all of them.
func (e *Encoder) gather(b, lo, hi, from, to int, v []float32) {
	g := e.part[b]
	if g == nil {
		if k := len(e.spare); k > 0 {
			g, e.spare = e.spare[k-1], e.spare[:k-1]
		} else {
			g = new(gathering)
		}
		g.have = 0
		e.part[b] = g
	}
	copy(g.v[from-lo:], v)
	if g.have += to - from; g.have == hi-lo {
		e.encode(b, g.v[:hi-lo])
		delete(e.part, b)
		e.spare = append(e.spare, g)
	}
}

// encode encodes v, whole blocks from block b on, in place in the buffer.
func (e *Encoder) encode(b int, v []float32) {
	var r []byte
	if e.resid != nil {
		r = e.resid[b*(int8Block+4):]
	}
	if e.p == INT4 {
		at := b * int4BlockBytes(int8Block)
		int4Encode(e.out[at:at+int4Bytes(len(v))], v, r)
		return
	}
	at := b * (int8Block + 4)
	int8Encode(e.out[at:at+int8Bytes(len(v))], v, r)
}

// Finish returns the slice's encoding, valid until the next Start; it
// fails if the pieces given add up to more or fewer than n values, or one
// lay outside the slice (it counts values: one given twice and another
// never is not caught).
func (e *Encoder) Finish() ([]byte, error) {
	if e.err != nil {
		return nil, e.err
	}
	if e.left != 0 || len(e.part) != 0 {
		return nil, fmt.Errorf("shardapi: encoder of %d values given %d, %d int8 blocks incomplete", e.n, e.n-e.left, len(e.part))
	}
	return e.out, nil
}

// Zero returns the encoding of n zeros (a join's push), valid until the
// next Start: all zero bytes in every precision (an int8 block of scale 0).
func (e *Encoder) Zero() []byte {
	e.Start(nil)
	clear(e.out)
	e.left = 0
	return e.out
}
