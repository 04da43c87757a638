// Package envoy renders and checks the Envoy configuration that puts condisagg in front of a
// vLLM fleet: the bootstrap used by the demo and the end-to-end tests, in every ext_proc body
// mode, and the helpers that find, validate and start the real Envoy binary.
//
// The bootstrap is bootstrap.yaml.tmpl, a Go text/template filled from Params by Render (defaults
// and validation in one place, Params.WithDefaults and Params.Validate). FindBinary locates the
// Envoy installed by scripts/install-envoy.sh ($ENVOY_BIN first); Validate runs
// `envoy --mode validate`; Start runs Envoy on loopback and reports its admin and listener
// addresses, including ports Envoy picked itself (port 0).
//
// Production examples for Istio and Envoy Gateway live in examples/; the tests validate their
// embedded Envoy fragments with the same binary. Everything here is safe for concurrent use; the
// package has no package-level mutable state. Of condisagg it imports only internal/proc (which
// runs Envoy) and internal/repo (which finds the project-local binary).
package envoy
