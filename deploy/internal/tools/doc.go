// Package tools finds the repository root and the command-line tools the deploy tests run:
// helm and promtool (built by scripts/install-tools.sh) and Envoy (scripts/install-envoy.sh).
//
// The deploy module is nested in the condisagg repository with its own go.mod, so "the nearest
// go.mod" is not the repository root here: Root looks for the go.mod of module
// github.com/condisagg/condisagg instead.
package tools
