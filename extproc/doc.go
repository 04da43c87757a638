// Package extproc is the Envoy external processor: it turns each OpenAI request that Envoy
// streams to it into a routing decision expressed as header mutations, and observes the
// response to release the decision's load bookings.
//
// One HTTP request is one ext_proc Process stream. Server.Process is the only loop: it
// receives a ProcessingRequest, hands it to the per-stream state machine (exchange.Step), and
// sends what the machine returns. Per-stream state is local to that call, never a field of
// the Server. The machine supports the three request body modes Envoy uses (BUFFERED,
// STREAMED, FULL_DUPLEX_STREAMED; envoy-extproc.md §1), assembles the body across chunks up to
// a hard limit, tolerates a duplicate end of stream, and never changes the body.
//
// The decision pipeline (Router.Decide) is: parse the routing fields of the body, tokenize
// with the tokenizer package, compute kvindex block keys, look up their overlap, take a pool
// snapshot, run policy.Decide and commit with pool.Book (conditional-disagg.md §3). Every
// response shape and header-mutation set is built by exactly one function in responses.go;
// errors become immediate responses in one place (errors.go).
//
// The response phase parses Server-Sent Events reassembled across chunks (sse.go) to release
// the prefill booking at the first token and everything at the end, on an upstream error, or
// when the stream ends before the response did (client cancel).
//
// Concurrency: a Server, Router and Admin are safe for concurrent use; the configuration is
// swapped atomically on reload. Imports: tokenizer, kvindex, policy, pool and the generated
// admin proto; never cmd or kvevents (event-stream state arrives through EventStreams).
package extproc
