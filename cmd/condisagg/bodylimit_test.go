package main

import (
	"testing"

	"github.com/condisagg/condisagg/envoy"
	"github.com/condisagg/condisagg/extproc"
)

// TestBodyLimitDefaultsAgree (issue 12 item 9, one body limit): the Envoy bootstraps buffer
// exactly condisagg's default max_body_bytes, so no body between the two limits skips routing.
func TestBodyLimitDefaultsAgree(t *testing.T) {
	if envoy.DefaultMaxBodyBytes != extproc.DefaultMaxBodyBytes {
		t.Fatalf("envoy.DefaultMaxBodyBytes %d, extproc.DefaultMaxBodyBytes %d: they must agree",
			envoy.DefaultMaxBodyBytes, extproc.DefaultMaxBodyBytes)
	}
}
