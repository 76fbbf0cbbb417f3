// Package test holds multi-process integration, fault-injection and
// end-to-end tests that run real dssp binaries on loopback.
package test
