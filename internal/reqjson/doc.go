// Package reqjson reads a request body's JSON the way vLLM's HTTP server does, so the router
// and the engine see the same fields.
//
// vLLM's FastAPI handlers call Python's json.loads on the body bytes, then validate the dict
// with pydantic v2 models in lax mode. The reading here follows both:
//
//   - json.loads: a leading UTF-8 BOM is skipped; the literals NaN, Infinity and -Infinity are
//     numbers; a key repeated in one object keeps its last value; keys match exactly (byte for
//     byte after escapes are decoded), never case-insensitively as encoding/json does; invalid
//     UTF-8 and control characters in strings are refused. Bodies in UTF-16 or UTF-32, which
//     json.loads would detect and decode, are refused with an error that says so.
//   - pydantic lax mode (Value.Bool, Value.Int): booleans from "true"/"yes"/"1"/... strings and
//     from 0, 1, 0.0 and 1.0; integers from floats with no fractional part, from numeric
//     strings and from booleans.
//
// Parse validates the whole document and indexes the top-level object's members; values are
// kept as raw byte spans of the body and decoded only when asked. Nothing here allocates per
// byte of input beyond the member index and decoded strings, and nesting is bounded by
// MaxDepth. The package has no state; every function is safe for concurrent use. It imports
// nothing of condisagg.
package reqjson
