// Package dsspmesh is the module root and holds no code. Its tests check
// rules of the whole repository that no single package can: the direction
// of imports between the packages (docs/design.md#dependency-direction);
// that every doc and comment refers only to files inside the repository,
// with links and anchors that resolve; and that go.mod marks direct and
// indirect dependencies as go mod tidy does.
//
// The design of the system is docs/design.md.
package dsspmesh
