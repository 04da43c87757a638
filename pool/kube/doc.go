// Package kube discovers workers from Kubernetes EndpointSlices and keeps a pool's discovery
// source equal to them (pool.SetMembers), so workers join and leave with no restart.
//
// Each Entry selects EndpointSlices by namespace and label selector and names the ports of a
// worker's HTTP server and KV event endpoints, as a static workers entry names them. Members
// (slices.go) is the pure core: EndpointSlices in, pool members out, with rules S1-S12 (ready
// and terminating conditions, missing ports, FQDN and malformed addresses, IPv6, duplicates
// across slices). Watcher is the shell: one client-go informer per entry and one loop that
// recomputes every entry's members after any change and hands them to the pool at once.
//
// Concurrency: Run owns every goroutine it starts (the informers, one cache-sync waiter per
// entry) and returns after they exit. The pool serialises membership changes; Watcher holds
// no pool lock. Metrics are injected (NewMetrics). It imports pool and no other condisagg
// package, and builds without cgo.
package kube
