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
	last2 := append([]uint32{128000}, hello[len(hello)-1:]...) // Hugging Face keeps BOS and cuts text from the left
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
		{"negative_token", "ids are unsigned", `{"prompt":[-1]}`, nil, "neither token ids", nil},
		{"empty_token_list", "vLLM rejects an empty prompt", `{"prompt":[]}`, nil, "empty token list", nil},
		{"bad_json", "body must parse", `{"prompt":`, nil, "parse completion request", nil},
		// issue 23 item 4: the body as vLLM's server reads it.
		{"case_variant_key_ignored", "json.loads keys are exact", `{"prompt":[1,2],"PROMPT":[9]}`, []uint32{1, 2}, "", nil},
		{"case_variant_key_alone", "json.loads keys are exact", `{"Prompt":[9]}`, nil, "prompt missing", nil},
		{"duplicate_last_wins", "dict keeps the last value", `{"prompt":[9],"prompt":[1,2]}`, []uint32{1, 2}, "", nil},
		{"float_ids", "pydantic lax int: 1.0 is 1", `{"prompt":[1.0,2e0,"3"]}`, []uint32{1, 2, 3}, "", nil},
		{"fractional_id", "pydantic lax int: 1.5 is refused", `{"prompt":[1.5]}`, nil, "neither token ids", nil},
		{"bom", "json.loads(bytes) decodes utf-8-sig", "\xef\xbb\xbf{\"prompt\":[4]}", []uint32{4}, "", nil},
		{"string_add_special_tokens", "pydantic lax bool", `{"prompt":"Hello world","add_special_tokens":"false"}`, hello, "", nil},
		{"truncate_ids_keeps_last", "truncation_side defaults to left for generating models", `{"prompt":[1,2,3,4],"truncate_prompt_tokens":2}`, []uint32{3, 4}, "", nil},
		{"truncate_ids_right", "truncation_side right keeps the first", `{"prompt":[1,2,3,4],"truncate_prompt_tokens":2,"truncation_side":"right"}`, []uint32{1, 2}, "", nil},
		{"truncate_text_keeps_bos", "Hugging Face truncation keeps special tokens", `{"prompt":"Hello world","truncate_prompt_tokens":2}`, last2, "", nil},
		{"truncate_text_left_slices", "an explicit side slices the encoded ids", `{"prompt":"Hello world","truncate_prompt_tokens":2,"truncation_side":"left"}`, hello[len(hello)-2:], "", nil},
		{"truncate_longer_than_prompt", "no truncation", `{"prompt":[1,2],"truncate_prompt_tokens":5}`, []uint32{1, 2}, "", nil},
		{"truncate_minus_one", "max_model_len-1: unknown here, no truncation", `{"prompt":[1,2],"truncate_prompt_tokens":-1}`, []uint32{1, 2}, "", nil},
		{"truncate_bad", "ge=-1", `{"prompt":[1,2],"truncate_prompt_tokens":-2}`, nil, "truncate_prompt_tokens", nil},
		{"truncation_side_bad", "Literal left|right", `{"prompt":[1,2],"truncate_prompt_tokens":1,"truncation_side":"middle"}`, nil, "truncation_side", nil},
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
