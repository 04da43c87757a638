// Package adminclient reaches a router's Admin gRPC service (Explain, ListWorkers) the way
// serve protects it (a bearer token, TLS, mutual TLS) and prints its answers as tables or JSON.
// The `condisagg explain` and `workers` commands use it (the e2e suite runs those commands).
package adminclient
