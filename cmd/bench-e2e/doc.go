// Command bench-e2e replays a short workload slice through the live stack (Envoy, condisagg,
// pd-sidecars and vllm-sim workers on loopback, run at a time scale) and through the cluster
// simulator with the same fleet, cost model and router settings, and compares TTFT p50 and
// TPOT p50 in simulated time.
//
// The live side runs the loadgen binary against Envoy with arrivals compressed by the time
// scale (loadgen --time-scale 1/scale) and multiplies the measured wall-clock latencies by the
// time scale; the simulated side runs cluster.Run on the same requests. Agreement is within
// 15 % (the tolerance of issue 7); a larger difference is reported with its likely cause, and
// the exit code stays 0: the tool measures, it does not test.
//
// `make bench-e2e` runs it with the defaults (a synthetic slice, no external files).
package main
