// Package helm holds the tests of the condisagg Helm chart in condisagg/: every variant is
// rendered by the real helm (scripts/install-tools.sh), every rendered object is decoded strictly
// into its Kubernetes, prometheus-operator, Istio, Gateway API or Envoy Gateway Go type, the
// rendered serve config is loaded by server/config, the gateway objects are compared with
// envoy/examples, and the plain-Envoy bootstrap runs through the real `envoy --mode validate`.
//
// The package has no non-test code besides this comment; examples/ holds the values files the
// tests and docs/deploy.md use.
package helm
