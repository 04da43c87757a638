// Package feedback is what condisagg learns from the answers to its decisions. The slo
// policy's closed loop (Learner.ObserveLatency, Corrections) keeps, per placement and metric, a
// smoothed ratio of observed to forecast latency and the correction the policy multiplies its
// forecasts with; the observed mix (ObserveRouted, ObserveOutput) prices the prefill and decode
// work the traffic needs (Advice). Collector exports both as Prometheus metrics.
//
// Data flows one way: route.Router reads the corrections at each decision and its tickets
// (route.Ticket) report each answer, the same way for the server and for the simulator;
// readers of the state (metrics, the simulator's report) hold the Learner they gave the
// router. The package does no I/O and keeps no clock: every sample carries its own values.
//
// Imports: policy (and prometheus for the collector).
package feedback
