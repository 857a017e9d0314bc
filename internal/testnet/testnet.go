// Package testnet holds network helpers for tests.
package testnet

import (
	"net"
	"testing"
)

// FreeAddr is a loopback HOST:PORT that nobody listens at: bound, then
// closed. A test may listen there itself, or expect a dial to be refused.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
