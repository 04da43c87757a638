package route

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/condisagg/condisagg/internal/repo"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/tokenizer"
)

// TestBoundedTokenization checks the CPU bounds of a decision's tokenization (issue 23 item
// 2; tokenizer budget.go): each row one rule.
func TestBoundedTokenization(t *testing.T) {
	tk, err := tokenizer.Load(repo.TestModel(t, "qwen3"), tokenizer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	chat := func(content string, extra map[string]any) []byte {
		m := map[string]any{"model": "qwen3", "messages": []map[string]string{{"role": "user", "content": content}}}
		for k, v := range extra {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return b
	}
	long := strings.Repeat("the system routes every request ", 40) // ~200 tokens
	cases := []struct {
		name   string
		spec   string
		body   []byte
		want   error         // nil: decided
		reason policy.Reason // when decided
	}{
		{name: "prompt_over_max_model_len_is_refused_as_vllm_refuses_it", spec: "vLLM renderers/params.py _token_len_check",
			body: chat(long, nil), want: ErrPromptTooLong},
		{name: "truncate_prompt_tokens_is_truncated_by_the_engine_not_refused", spec: "vLLM truncate_prompt_tokens",
			body: chat(long, map[string]any{"truncate_prompt_tokens": 32}), reason: policy.ReasonRemoteRatioTooHigh},
		{name: "a_pretoken_over_the_bound_is_routed_by_load", spec: "issue 23 item 2",
			body: chat("hello "+strings.Repeat("z", 200), nil), reason: policy.ReasonLongPretoken},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, p := testRouterWith(t, Options{Tokenizer: tk, MaxPretokenBytes: 128})
			r.models[0].maxLen = 64
			out, err := r.Decide(context.Background(), &Request{Endpoint: EndpointChat, Body: c.body})
			if c.want != nil {
				if !errors.Is(err, c.want) || !errors.Is(err, ErrInvalidBody) {
					t.Fatalf("err = %v, want %v (a 400)", err, c.want)
				}
				var le *tokenizer.LengthError
				if !errors.As(err, &le) || le.MaxTokens != 64 || le.Tokens != 65 {
					t.Fatalf("err = %#v, want vLLM's input_tokens refusal at 65 of 64", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out.Decision.Reason != c.reason || out.BookingID == "" {
				t.Fatalf("reason %s booking %q, want %s booked", out.Decision.Reason, out.BookingID, c.reason)
			}
			if !p.Release(out.BookingID) {
				t.Fatal("booking not found")
			}
		})
	}
}
