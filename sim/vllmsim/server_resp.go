package vllmsim

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/condisagg/condisagg/sim"
)

// Response shapes of vLLM's OpenAI server (vllm/entrypoints/openai/protocol.py); field order
// follows vLLM's JSON.

type usage struct {
	PromptTokens        int             `json:"prompt_tokens"`
	TotalTokens         int             `json:"total_tokens"`
	CompletionTokens    int             `json:"completion_tokens"`
	PromptTokensDetails *promptTokDetls `json:"prompt_tokens_details"`
}

type promptTokDetls struct {
	CachedTokens int `json:"cached_tokens"`
}

type chatMessage struct {
	Role             string   `json:"role"`
	Content          string   `json:"content"`
	Refusal          *string  `json:"refusal"`
	Annotations      *string  `json:"annotations"`
	Audio            *string  `json:"audio"`
	FunctionCall     *string  `json:"function_call"`
	ToolCalls        []string `json:"tool_calls"`
	ReasoningContent *string  `json:"reasoning_content"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     *string     `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
	StopReason   *string     `json:"stop_reason"`
}

type chatResponse struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	Choices           []chatChoice    `json:"choices"`
	ServiceTier       *string         `json:"service_tier"`
	SystemFingerprint *string         `json:"system_fingerprint"`
	Usage             usage           `json:"usage"`
	PromptLogprobs    *string         `json:"prompt_logprobs"`
	KVTransferParams  json.RawMessage `json:"kv_transfer_params"`
}

type textChoice struct {
	Index          int     `json:"index"`
	Text           string  `json:"text"`
	Logprobs       *string `json:"logprobs"`
	FinishReason   *string `json:"finish_reason"`
	StopReason     *string `json:"stop_reason"`
	PromptLogprobs *string `json:"prompt_logprobs,omitempty"`
}

type textResponse struct {
	ID               string          `json:"id"`
	Object           string          `json:"object"`
	Created          int64           `json:"created"`
	Model            string          `json:"model"`
	Choices          []textChoice    `json:"choices"`
	Usage            *usage          `json:"usage,omitempty"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
}

type chatDelta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

type chatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     *string   `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   *usage            `json:"usage,omitempty"`
}

func (s *Server) usageOf(out *outputs) usage {
	u := usage{PromptTokens: out.fin.PromptTokens, CompletionTokens: len(out.toks)}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if s.cfg.PromptTokens {
		u.PromptTokensDetails = &promptTokDetls{CachedTokens: out.fin.CachedTokens}
	}
	return u
}

// usageFor is the usage of p's answer. A decode leg whose kv_transfer_params carry
// remote_prefill_cached_tokens reports that number as cached, not its own (vLLM 0.32,
// OutputProcessor: the prefill worker's hit rather than the transfer's ~100 %).
func (s *Server) usageFor(p *prepared, out *outputs) usage {
	u := s.usageOf(out)
	if n, ok := p.body.KVTransferParams.reportedCached(); ok && u.PromptTokensDetails != nil && s.cfg.KVTransfer != nil {
		u.PromptTokensDetails.CachedTokens = n
	}
	return u
}

// kvParams is the top-level kv_transfer_params of a prefill-only (do_remote_decode) answer
// (vllm-kv-events.md §6.3 step 3), or JSON null.
func (s *Server) kvParams(p *prepared, out *outputs) json.RawMessage {
	if !p.req.PrefillOnly || s.cfg.KVTransfer == nil {
		return json.RawMessage("null")
	}
	kt := s.cfg.KVTransfer
	ids := out.fin.BlockIDs
	if ids == nil {
		ids = []int32{}
	}
	// vLLM 0.32's shape: block ids per KV cache group (one group here), the prompt length,
	// and the prefill worker's own prefix-cache hit.
	b, _ := json.Marshal(struct {
		DoRemotePrefill           bool      `json:"do_remote_prefill"`
		DoRemoteDecode            bool      `json:"do_remote_decode"`
		RemoteBlockIDs            [][]int32 `json:"remote_block_ids"`
		RemoteEngineID            string    `json:"remote_engine_id"`
		RemoteRequestID           string    `json:"remote_request_id"`
		RemoteHost                string    `json:"remote_host"`
		RemotePort                int       `json:"remote_port"`
		TPSize                    int       `json:"tp_size"`
		DCPSize                   int       `json:"dcp_size"`
		PPSize                    int       `json:"pp_size"`
		RemoteNumTokens           int       `json:"remote_num_tokens"`
		RemoteBlocksExpiryTime    *float64  `json:"remote_blocks_expiry_time"`
		TransferMode              string    `json:"transfer_mode"`
		RemotePrefillCachedTokens int       `json:"remote_prefill_cached_tokens"`
	}{true, false, [][]int32{ids}, kt.EngineID, p.id, kt.Host, kt.Port, 1, 1, 1, out.fin.PromptTokens, nil, "pull", out.fin.CachedTokens})
	return b
}

func (s *Server) respond(w http.ResponseWriter, p *prepared, out *outputs) {
	text := string(s.cfg.Vocab.AppendText(nil, out.toks))
	reason := out.fin.Reason.String()
	u := s.usageFor(p, out)
	created := time.Now().Unix()
	model := s.cfg.ModelNames[0]
	if p.chat {
		writeJSON(w, chatResponse{ID: p.id, Object: "chat.completion", Created: created, Model: model,
			Choices: []chatChoice{{Message: chatMessage{Role: "assistant", Content: text, ToolCalls: []string{}}, FinishReason: reason}},
			Usage:   u, KVTransferParams: s.kvParams(p, out)})
		return
	}
	writeJSON(w, textResponse{ID: p.id, Object: "text_completion", Created: created, Model: model,
		Choices: []textChoice{{Text: text, FinishReason: &reason}}, Usage: &u, KVTransferParams: s.kvParams(p, out)})
}

// stream writes the SSE answer: one chunk per token (chat starts with a role chunk), the
// finish reason on the last token's chunk, a usage chunk with no choices when
// stream_options.include_usage, then "data: [DONE]".
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, p *prepared, st *Stream, out *outputs) error {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	created := time.Now().Unix()
	model := s.cfg.ModelNames[0]
	send := func(v any) {
		b, _ := json.Marshal(v)
		_, _ = w.Write([]byte("data: "))
		_, _ = w.Write(b)
		_, _ = w.Write([]byte("\n\n"))
	}
	object := "text_completion"
	if p.chat {
		object = "chat.completion.chunk"
		send(chatChunk{ID: p.id, Object: object, Created: created, Model: model,
			Choices: []chatChunkChoice{{Delta: chatDelta{Role: "assistant"}}}})
	}
	for out.fin == nil {
		toks, err := s.next(ctx, st, out)
		if err != nil {
			return err
		}
		if out.fin != nil && out.fin.Reason == sim.FinishError {
			// vLLM's streamed GenerationError: an error event, then [DONE].
			send(map[string]any{"error": map[string]any{"message": generationError, "type": "InternalServerError", "param": nil, "code": http.StatusInternalServerError}})
			break
		}
		for i, tk := range toks {
			var fr *string
			if out.fin != nil && i == len(toks)-1 {
				r := out.fin.Reason.String()
				fr = &r
			}
			text := string(s.cfg.Vocab.AppendText(nil, []uint32{tk}))
			if p.chat {
				c := chatChunkChoice{Delta: chatDelta{Content: text}, FinishReason: fr}
				send(chatChunk{ID: p.id, Object: object, Created: created, Model: model, Choices: []chatChunkChoice{c}})
			} else {
				send(textResponse{ID: p.id, Object: object, Created: created, Model: model,
					Choices: []textChoice{{Text: text, FinishReason: fr}}})
			}
		}
		if fl != nil {
			fl.Flush()
		}
	}
	if p.includeUs && out.fin.Reason != sim.FinishError {
		u := s.usageFor(p, out)
		if p.chat {
			send(chatChunk{ID: p.id, Object: object, Created: created, Model: model, Choices: []chatChunkChoice{}, Usage: &u})
		} else {
			send(textResponse{ID: p.id, Object: object, Created: created, Model: model, Choices: []textChoice{}, Usage: &u})
		}
	}
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
	if fl != nil {
		fl.Flush()
	}
	return nil
}
