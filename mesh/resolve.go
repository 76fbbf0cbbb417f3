package mesh

import "fmt"

// Resolver maps a node id to the transport address it is dialled at (the
// QUICAddr of its Meta). An id it cannot place is an error wrapping
// ErrNoRoute.
type Resolver func(id NodeID) (addr string, err error)

// ResolveFromMembership resolves node ids through m's live view, read at
// each call.
func ResolveFromMembership(m Membership) Resolver {
	return func(id NodeID) (string, error) {
		for _, mem := range m.Members() {
			if mem.ID == id {
				return mem.QUICAddr, nil
			}
		}
		return "", fmt.Errorf("mesh: node %q is not a live member: %w", id, ErrNoRoute)
	}
}
