// Package repo finds the root of the condisagg source tree: the nearest directory at or above
// the working directory that holds go.mod.
//
// Tests and developer tools (the Envoy lookup in envoy, the stack builder in e2e, cmd/bench-e2e)
// run from somewhere inside the tree and need paths relative to its root: the project-local
// Envoy, the tokenizer models, `go build ./cmd/...`. The package has no state and imports only
// the standard library.
package repo
