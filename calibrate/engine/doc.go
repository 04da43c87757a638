// Package engine is the shell of calibrate: `condisagg calibrate` sends the planned probes to
// one live OpenAI-compatible engine (vLLM's server or vllm-sim), times its streamed tokens,
// reads its bounds from /v1/models and /metrics, fits the cost model with package calibrate,
// and writes the model file and an SVG of measured against fitted.
//
// It never floods the engine: requests go out under a rate cap (bursts of at most one decode
// probe), the sweep stops at --max-minutes, and a busy engine is refused before the first
// probe. Run returns only after every request it started has ended.
package engine
