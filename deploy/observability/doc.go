// Package observability generates condisagg's Grafana dashboard (grafana/condisagg.json) and
// tests it and the Prometheus alert rules (prometheus/condisagg-alerts.yaml).
//
// The dashboard is written as Go values here and marshalled to Grafana's dashboard JSON model;
// `go test ./observability -update` (in deploy/) rewrites the JSON file, and the test fails when it
// is stale. Every query is checked by promtool (it must parse) and, in the main module, against
// the metrics the condisagg binary registers (server TestObservabilityMetricNames).
//
// The "Disaggregation truth" row shows whether remote-prefill requests' decode legs used the
// transferred KV (condisagg_disagg_transfers_total, docs/disagg-truth.md).
//
// Not on the dashboard because condisagg does not measure them yet: shadow-evaluation agreement
// and what local prefill would have cost instead of a remote decision.
package observability
