// Package admin is condisagg's Admin API: the condisagg.v1.Admin gRPC service (Explain,
// ListWorkers, ReloadConfig, Shadow, Recent, ResetPrefixCache), the admin HTTP port's
// endpoints (/metrics, /healthz, /readyz, /debug/explain) and their authentication (a bearer
// token, mutual TLS).
//
// The Service reads the decision pipeline through the small interfaces it declares: Router
// (Decider for Explain, Fleet for ListWorkers and ResetPrefixCache, the shadow agreement), which
// *route.Router satisfies, and RecentSource for Recent, which *extproc.Server satisfies: the
// decisionlog.Recent the server adds every routed request to, and the transfer truth of the
// remote ones (decisionlog.Transfer) by each decision's Seq. Event-stream state arrives through
// StreamReporter. Explain decides with DryRun, so it books nothing.
//
// ResetPrefixCache fences every rank of an engine in its model's index before it asks the
// engine to reset (kvindex fence.go), then clears the ranks or lifts the fences: a batch
// published before the reset cannot put its blocks back.
//
// Errors become gRPC status codes in one place (errors.go). NewServer serves the Service on a
// gRPC server of its own, never on the ext_proc port; with a token every call must carry it
// (compared in constant time), and RequireToken guards the HTTP endpoints that reveal cache
// contents or routing.
//
// Concurrency: a Service is safe for concurrent use; it holds no mutable state of its own.
// Imports: route, policy, kvindex, decisionlog and the generated admin proto; never extproc
// (the RecentSource interface stands for the server), cmd, tokenizer or kvevents.
package admin
