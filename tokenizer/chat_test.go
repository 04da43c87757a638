package tokenizer

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"
)

func newSyntheticWithTemplate(t *testing.T, tmpl string) *Tokenizer {
	t.Helper()
	tk := loadSynthetic(t, "bytelevel")
	ct, err := compileChatTemplate(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	tk.chat = ct
	tk.cfg.bosToken, tk.cfg.eosToken = "<bos>", "<eos>"
	return tk
}

// TestRenderChatRules checks each request-to-template rule on a probe template.
func TestRenderChatRules(t *testing.T) {
	const probe = `{% for m in messages %}[{{ m.role }}|{{ m.content }}{% if m.tool_calls %}|{{ m.tool_calls | tojson }}{% endif %}{% if m.tool_call_id %}|{{ m.tool_call_id }}{% endif %}]{% endfor %}` +
		`{% if tools is not none %}T{{ tools | tojson }}{% endif %}{% if add_generation_prompt %}G{% endif %}{% if enable_thinking is defined %}E{{ enable_thinking }}{% endif %}{{ bos_token }}{{ eos_token }}`
	tk := newSyntheticWithTemplate(t, probe)
	cases := []struct {
		name, spec, body, want string
	}{
		{"string_content_and_default_generation_prompt", "vLLM add_generation_prompt defaults to true",
			`{"messages":[{"role":"user","content":"hi"}]}`, "[user|hi]G<bos><eos>"},
		{"content_parts_joined_with_newline", "vLLM chat_utils: text parts joined by \\n for string-format templates",
			`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},"b",{"type":"text","text":"c"}]}],"add_generation_prompt":false}`, "[user|a\nb\nc]<bos><eos>"},
		{"null_content_is_empty", "vLLM: content None -> no parts -> \"\"",
			`{"messages":[{"role":"assistant","content":null}],"add_generation_prompt":false}`, "[assistant|]<bos><eos>"},
		{"tool_call_arguments_parsed", "vLLM _postprocess_messages: JSON-string arguments become objects, key order kept",
			`{"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"z\":1,\"a\":[1.0,\"é\"]}"}}]}],"add_generation_prompt":false}`,
			`[assistant||[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"z": 1, "a": [1.0, "é"]}}}]]<bos><eos>`},
		{"empty_arguments_become_object", "vLLM _postprocess_messages: empty arguments -> {}",
			`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":""}}]}],"add_generation_prompt":false}`,
			`[assistant||[{"function": {"name": "f", "arguments": {}}}]]<bos><eos>`},
		{"tool_message_keeps_tool_call_id", "vLLM: tool_call_id copied for role tool",
			`{"messages":[{"role":"tool","tool_call_id":"c1","content":"42","extra":"dropped"}],"add_generation_prompt":false}`, "[tool|42|c1]<bos><eos>"},
		{"tools_dumped_with_nulls", "vLLM ChatCompletionToolsParam.model_dump(): description/parameters null when absent",
			`{"messages":[],"tools":[{"type":"function","function":{"name":"f"}}],"add_generation_prompt":false}`,
			`T[{"type": "function", "function": {"name": "f", "description": null, "parameters": null}}]<bos><eos>`},
		{"chat_template_kwargs_passed_through", "vLLM chat_template_kwargs become template variables",
			`{"messages":[],"chat_template_kwargs":{"enable_thinking":false}}`, "GEFalse<bos><eos>"},
		{"chat_template_kwargs_override_request_fields", "vLLM updates its template kwargs with chat_template_kwargs last",
			`{"messages":[],"add_generation_prompt":true,"chat_template_kwargs":{"add_generation_prompt":false}}`, "<bos><eos>"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := tk.RenderChat([]byte(c.body), ChatOptions{})
			if err != nil {
				t.Fatalf("%s: %v", c.spec, err)
			}
			if got != c.want {
				t.Errorf("%s:\n got %q\nwant %q", c.spec, got, c.want)
			}
		})
	}
}

func TestRenderChatErrors(t *testing.T) {
	tk := newSyntheticWithTemplate(t, `{% if messages|length > 1 %}{{ raise_exception('only one message: ' ~ messages|length) }}{% endif %}ok`)
	cases := []struct {
		name, body, want string
		is               error
	}{
		{"not_json", `{"messages":`, "parse chat request", nil},
		{"not_object", `[1]`, "not a JSON object", nil},
		{"messages_missing", `{}`, "messages missing", nil},
		{"role_missing", `{"messages":[{"content":"x"}]}`, "role", nil},
		{"image_part_refused", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, "image_url", ErrUnsupported},
		{"bad_arguments_json", `{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{"}}]}]}`, "arguments", nil},
		{"raise_exception_surfaces", `{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`, "only one message: 2", nil},
		{"bad_generation_prompt", `{"messages":[],"add_generation_prompt":"maybe"}`, "add_generation_prompt", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := tk.EncodeChat(nil, []byte(c.body), ChatOptions{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v, want one containing %q", err, c.want)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %v is not %v", err, c.is)
			}
		})
	}
	plain := loadSynthetic(t, "bytelevel")
	if _, err := plain.EncodeChat(nil, []byte(`{"messages":[]}`), ChatOptions{}); !errors.Is(err, ErrNoChatTemplate) {
		t.Errorf("no template: error = %v, want ErrNoChatTemplate", err)
	}
}

func TestStrftimeNowUsesRequestTime(t *testing.T) {
	tk := newSyntheticWithTemplate(t, `{{ strftime_now("%d %b %Y %H:%M:%S %A %j %p %I %%") }}`)
	now := time.Date(2026, 2, 3, 14, 5, 6, 0, time.UTC)
	got, err := tk.RenderChat([]byte(`{"messages":[]}`), ChatOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if want := "03 Feb 2026 14:05:06 Tuesday 034 PM 02 %"; got != want {
		t.Errorf("strftime_now = %q, want %q", got, want)
	}
	if _, err := strftime(now, "%Q"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("unknown directive: error = %v, want ErrUnsupported", err)
	}
}

// TestEncodeChatSpecialTokens: chat prompts are encoded with
// add_special_tokens=false unless the request sets it (vLLM's field).
func TestEncodeChatSpecialTokens(t *testing.T) {
	tk := loadModel(t, "llama3", Options{})
	body := `{"messages":[{"role":"user","content":"hi"}]}`
	plain, err := tk.EncodeChat(nil, []byte(body), ChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if plain[0] != 128000 || plain[1] == 128000 {
		t.Fatalf("template BOS only once expected, got %v", clip32(plain, 4))
	}
	withSpecial, err := tk.EncodeChat(nil, []byte(`{"add_special_tokens":true,`+body[1:]), ChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(withSpecial) != len(plain)+1 || withSpecial[0] != 128000 || withSpecial[1] != 128000 {
		t.Errorf("add_special_tokens=true: got %v, want a second BOS before %v", clip32(withSpecial, 4), clip32(plain, 4))
	}
}

func TestQwen3EnableThinking(t *testing.T) {
	tk := loadModel(t, "qwen3", Options{})
	got, err := tk.RenderChat([]byte(`{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false}}`), ChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestEngineDifferencesWorkedAround: where ardanlabs/jinja prints differently
// from Jinja2 we rewrite the template; expectations are Jinja2's output under
// transformers' environment.
func TestEngineDifferencesWorkedAround(t *testing.T) {
	cases := []struct {
		name, spec, tmpl, want string
	}{
		{"scalars_print_like_python", "Jinja2 prints str(value): 1.0, None, True, 2.5e-07",
			"{{ 1.0 }}|{{ none }}|{{ true }}|{{ 2.5e-7 }}|{{ 3 }}|{{ 'x' }}|{{ [1, 'a'] }}", "1.0|None|True|2.5e-07|3|x|[1, 'a']"},
		{"whitespace_control_kept", "{{- -}} still trims around a rewritten output",
			"{% set v = {'a': 1.5} %}{{ v.a }}|  {{- ' t ' -}}  |{{ v | tojson }}", `1.5| t |{"a": 1.5}`},
		{"request_floats_print_like_python", "JSON 1.0 from the request prints as 1.0",
			"{{ messages[0].content }}{{ messages[0].x }}", "1.0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk := newSyntheticWithTemplate(t, c.tmpl)
			vars, _, err := tk.chatVars([]byte(`{"messages":[{"role":"user","content":"c"}]}`), ChatOptions{})
			if err != nil {
				t.Fatal(err)
			}
			msg := jinja.NewDict()
			msg.AsDict().Set("content", jinja.NewFloat(1.0))
			vars["messages"] = jinja.NewList([]jinja.Value{msg})
			got, err := tk.chat.tmpl.RenderValues(vars)
			if err != nil {
				t.Fatalf("%s: %v", c.spec, err)
			}
			if got != c.want {
				t.Errorf("%s:\n got %q\nwant %q", c.spec, got, c.want)
			}
		})
	}
	// A tag the output rewrite misreads ('}}' inside a string) still compiles
	// through the fallback.
	ct, err := compileChatTemplate("{{ '}}' }}")
	if err != nil {
		t.Fatalf("fallback compile: %v", err)
	}
	if got, err := ct.tmpl.RenderValues(nil); err != nil || got != "}}" {
		t.Errorf("fallback render = %q, %v; want %q", got, err, "}}")
	}
}
