//go:build !unix

package envoy

import "testing"

// deadEndpoint would hold a bound, never listening socket (deadport_unix_test.go); the tests
// that need one run where Envoy does.
func deadEndpoint(t *testing.T) Endpoint {
	t.Helper()
	t.Skip("needs a bound TCP socket that never listens (unix)")
	return Endpoint{}
}
