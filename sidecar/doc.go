// Package sidecar executes the remote-prefill path of a request as an HTTP reverse proxy: prefill
// at the worker named by x-condisagg-prefill-host, then decode at x-condisagg-decode-host with
// the KV handle the prefill returned, streaming the decode answer back.
//
// # Flow (vllm-kv-events.md §6.3, vLLM's NixlConnector)
//
// A POST to /v1/completions, /v1/chat/completions or /v1/responses that carries a prefill host
// (x-condisagg-prefill-host, or x-prefiller-host-port for llm-d compatibility) takes the remote
// path:
//
//  1. Prefill leg: the client's JSON with "stream": false, "max_tokens": 1 (also
//     "max_completion_tokens": 1 when present; "max_output_tokens": 1 for /v1/responses),
//     stream_options, min_tokens and min_completion_tokens removed, and
//     "kv_transfer_params": {"do_remote_decode": true, ...nulls}. Other members keep their
//     bytes and their order.
//  2. P answers a non-streamed completion with a top-level kv_transfer_params object. It is
//     opaque: the decode leg gets it byte for byte, but for remote_prefill_cached_tokens (vLLM
//     0.32), which is removed: with it D reports P's prefix hit as its cached_tokens, so the
//     answer would no longer say whether D used the KV (docs/disagg-truth.md).
//  3. Decode leg: the client's original JSON plus P's kv_transfer_params, to D. D's status,
//     headers and body go to the client unchanged, each read flushed at once for event streams;
//     a chat stream's opening role chunk is held until the first token or error (below).
//     The answer carries X-Condisagg-Prefill-Cached-Tokens (P's hit) and
//     X-Condisagg-KV-Transfer (pulled, rewritten, failed or fallback) for the router.
//
// Both legs carry the same X-Request-Id (the client's, else a new UUID4) and the client's
// end-to-end headers (Authorization included); hop-by-hop headers and the routing contract
// (x-condisagg-*, x-gateway-destination-endpoint, x-prefiller-host-port) are never forwarded.
//
// Data-parallel ranks: x-condisagg-prefill-rank and x-condisagg-decode-rank (one decimal
// integer in [0, 65535], else 400 invalid_rank) become X-Data-Parallel-Rank on the prefill leg
// and on the decode leg respectively (vLLM pins the request to that engine); a received
// X-Data-Parallel-Rank is never forwarded.
//
// Config.DialOverrides maps an allowed host:port to the address actually dialled, for a sidecar
// that listens on the endpoint its prefill worker advertises to the router.
//
// Everything else (no prefill host, other paths and methods) passes straight to D. A request
// without x-condisagg-decode-host goes to Config.DefaultDecodeHost, or gets 403 no_decode_host
// when none is configured. On every path a client-sent kv_transfer_params is removed before D
// sees it, so a client cannot point D's KV pull at a host of its choice.
//
// # Failures
//
//   - A prefill or decode host outside the Allowlist (exact canonical host:port; the SSRF
//     guard) gets 403 host_not_allowed before the body is read; a body over MaxBodyBytes 413.
//   - Connect failures and 502/503/504 answers are retried up to MaxAttempts per leg with
//     doubling backoff; nothing has been sent to the client then. Other statuses are final.
//   - Prefill failure (connect, transport, PrefillTimeout, 5xx, 408, 429, or an answer with no
//     kv_transfer_params object): with FallbackLocal (default) D prefills locally (the original
//     JSON without kv_transfer_params), counted in condisagg_sidecar_prefill_fallbacks_total;
//     with FallbackOff P's answer goes back unchanged (or 502/504 JSON when P gave none).
//     Other 4xx answers of P are the client's error and go back unchanged in both modes.
//   - A decode leg that could not load P's KV (vLLM's default kv_load_failure_policy "fail":
//     HTTP 500, or an error event before the first token) is sent to D once more without
//     kv_transfer_params, so D prefills locally; the client gets that answer, marked failed,
//     counted in condisagg_sidecar_kv_load_failures_total.
//   - A decode that fails before its headers (or, on the remote path, before its first token)
//     gets 502/504 JSON; after that the client connection is aborted. A client that goes away
//     cancels the upstream calls.
//
// Errors the sidecar makes are OpenAI-style JSON ({"error":{"message","type","param","code"}})
// with X-Condisagg-Error: <code>.
//
// # Concurrency
//
// Proxy is safe for concurrent use; per-request state lives on the serving goroutine. The
// Allowlist swaps an immutable set through an atomic pointer; RunResolver is the only
// goroutine-starting loop and is owned by its caller's context.
//
// Imports: no other condisagg package.
package sidecar
