package tokenizer

import (
	"errors"
	"strings"
	"testing"
)

func TestEncodeCompletion(t *testing.T) {
	tk := loadModel(t, "llama3", Options{})
	hello := tk.Encode(nil, "Hello world", WithoutSpecialTokens)
	withBOS := append([]uint32{128000}, hello...)
	cases := []struct {
		name, spec, body string
		want             []uint32
		err              string
		is               error
	}{
		{"string_prompt_gets_bos", "vLLM completions: add_special_tokens defaults to true", `{"prompt":"Hello world"}`, withBOS, "", nil},
		{"add_special_tokens_false", "vLLM completions add_special_tokens=false", `{"prompt":"Hello world","add_special_tokens":false}`, hello, "", nil},
		{"token_ids_pass_through", "a token-id prompt is used as is", `{"prompt":[1,2,3]}`, []uint32{1, 2, 3}, "", nil},
		{"single_element_list_unwrapped", "a one-prompt batch is that prompt", `{"prompt":["Hello world"]}`, withBOS, "", nil},
		{"single_token_list_unwrapped", "a one-prompt batch of ids", `{"prompt":[[7,8]]}`, []uint32{7, 8}, "", nil},
		{"batch_refused", "several prompts have no single token list", `{"prompt":["a","b"]}`, nil, "2 prompts", ErrBatchPrompt},
		{"missing_prompt", "prompt is required", `{"model":"m"}`, nil, "prompt missing", nil},
		{"negative_token", "ids are unsigned", `{"prompt":[-1]}`, nil, "neither a string nor token ids", nil},
		{"empty_token_list", "vLLM rejects an empty prompt", `{"prompt":[]}`, nil, "empty token list", nil},
		{"bad_json", "body must parse", `{"prompt":`, nil, "parse completion request", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := tk.EncodeCompletion(nil, []byte(c.body))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("%s: error = %v, want %q", c.spec, err, c.err)
				}
				if c.is != nil && !errors.Is(err, c.is) {
					t.Errorf("%s: error %v is not %v", c.spec, err, c.is)
				}
				return
			}
			if err != nil || !equalIDs(got, c.want) {
				t.Errorf("%s: got %v, %v; want %v", c.spec, got, err, c.want)
			}
		})
	}
}
