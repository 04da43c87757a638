package workload

import (
	"encoding/json"
	"strconv"

	"github.com/condisagg/condisagg/internal/splitmix"
)

// BodyOptions shape a /v1/completions body.
type BodyOptions struct {
	Model string
	// Stream asks for SSE with a final usage chunk (stream_options.include_usage).
	Stream bool
}

// AppendCompletionBody appends r as an OpenAI /v1/completions JSON body whose prompt is the
// array of r's token ids (vLLM accepts `prompt` as a token array; random ids would not
// survive a decode/re-encode round trip as text). The output length is forced:
// max_tokens = min_tokens = OutputTokens (at least 1) with ignore_eos, as for trace replay.
func AppendCompletionBody(dst []byte, v Vocab, r *Request, o BodyOptions) []byte {
	dst = append(dst, `{"model":`...)
	dst = appendJSONString(dst, o.Model)
	dst = append(dst, `,"prompt":[`...)
	span := uint64(v.Hi - v.Lo)
	first := true
	for _, s := range r.Prompt {
		x := v.Seed ^ (s.ID * phi)
		for k := uint64(s.Start); k < uint64(s.Start)+uint64(s.Len); k++ {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = strconv.AppendUint(dst, uint64(v.Lo)+splitmix.Mix64(x+k)%span, 10)
		}
	}
	n := strconv.Itoa(max(1, r.OutputTokens))
	dst = append(dst, `],"max_tokens":`...)
	dst = append(dst, n...)
	dst = append(dst, `,"min_tokens":`...)
	dst = append(dst, n...)
	dst = append(dst, `,"ignore_eos":true`...)
	if o.Stream {
		dst = append(dst, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	return append(dst, '}')
}

func appendJSONString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}
