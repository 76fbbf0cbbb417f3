package mesh

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// MaxMsgpackDepth is the nesting limit UnmarshalBounded applies.
const MaxMsgpackDepth = 16

// UnmarshalBounded decodes the msgpack object b into v after checking that
// every length it declares fits in b and that it nests at most
// MaxMsgpackDepth deep, so bytes from a peer or a replicated log cannot make
// the decoder allocate far more than len(b) (msgpack v5.4.1 reserves the
// declared length of an array up front). Use it for every msgpack header
// that did not come from this process.
func UnmarshalBounded(b []byte, v any) error {
	if err := validateMsgpack(b, MaxMsgpackDepth); err != nil {
		return fmt.Errorf("%w: %v", ErrBadMsgpack, err)
	}
	if err := msgpack.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadMsgpack, err)
	}
	return nil
}
