package node

import "testing"

// An HTTP listener on every interface is announced at the host peers
// reach the node's QUIC at; a specific one as it is.
func TestAdvertisedHTTP(t *testing.T) {
	for _, c := range []struct{ listen, quic, want string }{
		{"127.0.0.1:7948", "127.0.0.1:7947", "127.0.0.1:7948"},
		{"0.0.0.0:7948", "10.1.2.3:7947", "10.1.2.3:7948"},
		{"[::]:7948", "10.1.2.3:7947", "10.1.2.3:7948"},
		{":7948", "[fd00::1]:7947", "[fd00::1]:7948"},
		{"10.9.9.9:80", "10.1.2.3:7947", "10.9.9.9:80"},
	} {
		if got := advertisedHTTP(c.listen, c.quic); got != c.want {
			t.Errorf("advertisedHTTP(%q, %q) = %q, want %q", c.listen, c.quic, got, c.want)
		}
	}
}
