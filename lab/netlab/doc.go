// Package netlab is the link lab: hosts of a mesh emulated on one Linux
// machine, each in its own network namespace, joined by veth pairs through
// switches, with finite links — each host's egress shaped by the kernel's
// token bucket (tc tbf), and between sites a slower link with a one-way
// delay and optional loss applied by a delay line of this package. Real
// `dssp node` processes run on its hosts through node/launch
// ([Lab.LaunchHosts]: `ip netns exec` into the host's namespace).
//
// # Topology
//
// A [Spec] (text form: "two-sites", "switch,hosts=8,rate=100mbit",
// "sites=2,hosts=2,rate=1gbit,between=100mbit,delay=25ms,loss=0.001") is
// Sites switches of Hosts hosts each. Each site's switch is a bridge in a
// namespace of its own; with two or more sites a router namespace joins
// the switches. A host's egress is shaped at Rate; the router's egress
// into each site at Between, after the delay line: every packet between
// sites is routed through a TUN device in the router, read by this
// process, held for Delay (dropped with probability Loss) and written
// back, so UDP (QUIC, gossip) and TCP (memberlist streams, HTTP) are
// delayed alike. [Spec.Unshaped] is the same topology with no shaping, no
// delay and no loss: the baseline of a shaped run. A management network
// (one veth in the root namespace, a switch of its own) carries only the
// nodes' HTTP, unshaped, so the launcher reads /status during a cut.
//
// # Contract
//
// [Start] needs root, ip and tc ([Check] says what is missing; [Require]
// fails a test under CI=true and skips it otherwise). It takes a free slot
// (an flock under /run/dssp-netlab; names and subnets derive from it, so
// labs of concurrent processes never collide) and first removes what a
// process killed with the slot's lock left behind ([Sweep]). [Lab.Close]
// kills every process still in the lab's namespaces, stops the delay
// line and deletes the namespaces (their veths, bridges, qdiscs and TUN go
// with them); Start undoes its partial work on any failure. A caller
// interrupted by a signal closes the lab on its way out; a process killed
// outright leaves namespaces that the next Start or [Sweep] removes.
// [Lab.Cut] and [Lab.Heal] drop and restore a site's traffic to the other
// sites at the router (silently, as a failed WAN link does). [Lab.Probe]
// measures the round trip (UDP) and rate (TCP) between two hosts from
// sockets this process opens in their namespaces ([Lab.In]). A Lab's
// methods are safe for concurrent use; the delay line runs in two
// goroutines of its own until Close.
package netlab
