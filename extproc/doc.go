// Package extproc is the Envoy external processor: it turns each OpenAI request that Envoy
// streams to it into a routing decision expressed as header mutations, and observes the
// response to release the decision's load bookings.
//
// One HTTP request is one ext_proc Process stream. Server.Process is the only loop: it
// takes a ProcessingRequest from the stream's receive goroutine, hands it to the per-stream
// state machine (exchange.Step), and sends what the machine returns. Per-stream state is local
// to that call, never a field of the Server. Each stream holds at most one booking and at most
// max_body_bytes of request body, and ends after stream_idle_timeout without the rest of its
// request; decisions run in a bounded number of slots (README "Resource bounds"). The machine supports the three request body modes Envoy uses (BUFFERED,
// STREAMED, FULL_DUPLEX_STREAMED; envoy-extproc.md §1), assembles the body across chunks up to
// a hard limit and tolerates a duplicate end of stream.
//
// The body changes in one way only: the client's engine-control members
// (route.EngineControlFields: kv_transfer_params, ec_transfer_params, vllm_xargs) are cut from
// every request body, whatever its path and body mode (cleanBody, echoBody). vLLM hands them
// to its KV and encoder-cache connectors, which act on them (NixlConnector pulls KV from the
// host and blocks kv_transfer_params names), so only pd-sidecar may set them, never a client.
// A body without them goes upstream untouched; a cleaned one replaces the client's (whole, with
// its Content-Length, or chunk by chunk through a route.StreamCleaner when the route is fixed
// at the headers); one that cannot be read well enough to clean is refused with 400 and never
// reaches a worker.
//
// The decision itself is route.Router.Decide (the one pipeline, shared with Explain and the
// cluster simulator); extproc only turns its Outcome into Envoy's answers, and adds every
// routed request to the decisionlog.Recent it was given. Every response shape and
// header-mutation set is built by exactly one function in mutations.go; errors become
// immediate responses in one place (errors.go).
//
// The response phase parses Server-Sent Events reassembled across chunks (sse.go) to release
// the prefill booking at the first token and everything at the end, on an upstream error, or
// when the stream ends before the response did (client cancel). A remote-prefill answer's last
// usage tells whether the decode worker used the transferred KV (truth.go,
// docs/disagg-truth.md); the outcome is counted per prefill/decode pair and kept in a ring
// behind one mutex (transferLog.mu), which Server.TransfersByDecision reports by the decision's
// decisionlog Seq (Admin Recent joins the two in package admin).
//
// Concurrency: a Server is safe for concurrent use; the settings are swapped atomically on
// reload. Imports: route, policy and decisionlog; never admin, cmd, tokenizer or kvevents
// (event-stream state reaches route through EventStreams). The Admin service, /debug/explain
// and admin auth are package admin.
package extproc
