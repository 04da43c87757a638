// Package decisionlog keeps the last routed decisions and the placement mix over time: what
// the admin status page and Admin Recent show of the requests the ext_proc server routed.
//
// Recent holds two fixed rings: the latest decisions (Entry: time, request id, model, the
// decision record and the policy inputs, the pipeline's latency) and, per time bucket, how many
// decisions went to each Placement (prefill, decode, prefill_local, fallback). extproc adds
// every routed request to it (decisions and fallbacks, not rejections, not Explain); Add returns
// the entry's Seq, by which later facts about the request (extproc's transfer outcome) are
// joined to it.
//
// Entries keep route's own record types (route.Record, policy.Inputs) and Add takes the
// route.Outcome as the pipeline returns it, rather than a record type of this package: the
// status page serves route.Record's fields as they are, so a copy here would have to follow
// every change to the record, and the placement is read off the outcome in one place
// (PlacementOf). The dependency is one way: decisionlog imports route and policy; route never
// imports decisionlog.
//
// Concurrency: a Recent is safe for concurrent use. Add is on the request path: one atomic
// increment, one per-slot lock, one struct copy and one atomic add; it never allocates. A nil
// *Recent records nothing. Imports: route and policy (their value types); never extproc,
// admin or cmd.
package decisionlog
