package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// TestContinueFinalMessageVLLM compares EncodeChat with the prompt ids a real
// vLLM 0.32 computed for continue_final_message chats (qwen3 tokenizer; made by
// scripts/vllmfacts/probe_chat.py).
func TestContinueFinalMessageVLLM(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "vllm_continue_final.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		VLLMVersion string `json:"vllm_version"`
		Tokenizer   string `json:"tokenizer"`
		Cases       []struct {
			Name       string          `json:"name"`
			Request    json.RawMessage `json:"request"`
			ChatIDs    []uint32        `json:"chat_completions_prompt_token_ids"`
			TokenizeID []uint32        `json:"tokenize_tokens"`
			Contrast   []uint32        `json:"contrast_generation_prompt_tokens"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) == 0 || fx.Tokenizer != "qwen3" {
		t.Fatalf("fixture: %d cases, tokenizer %q", len(fx.Cases), fx.Tokenizer)
	}
	tk := loadModel(t, fx.Tokenizer, Options{})
	for _, c := range fx.Cases {
		t.Run(c.Name, func(t *testing.T) {
			if !slices.Equal(c.ChatIDs, c.TokenizeID) {
				t.Fatalf("fixture: /v1/chat/completions and /tokenize disagree")
			}
			got, err := tk.EncodeChat(nil, c.Request, ChatOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.ChatIDs) {
				t.Errorf("vLLM %s prompt ids differ at %d\n got %v\nwant %v", fx.VLLMVersion, firstDiff(got, c.ChatIDs), got, c.ChatIDs)
			}
			// The same chat closed with a generation prompt, as vLLM rendered it.
			var req map[string]any
			if err := json.Unmarshal(c.Request, &req); err != nil {
				t.Fatal(err)
			}
			req["continue_final_message"], req["add_generation_prompt"] = false, true
			body, _ := json.Marshal(req)
			closed, err := tk.EncodeChat(nil, body, ChatOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(closed, c.Contrast) {
				t.Errorf("closed chat differs at %d\n got %v\nwant %v", firstDiff(closed, c.Contrast), closed, c.Contrast)
			}
		})
	}
}

// TestContinueFinalMessageCut: where the prompt is cut, checked against
// transformers 5.24's render_jinja_template on the same templates and chats.
func TestContinueFinalMessageCut(t *testing.T) {
	const probe = `{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}{% if add_generation_prompt %}<gen>{% endif %}{% if continue_final_message is defined %}CFM{% endif %}`
	cases := []struct {
		name, tmpl, body, want string
	}{
		{"trailing_space_kept_when_template_keeps_it", probe,
			`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"ab "}],"add_generation_prompt":false,"continue_final_message":true}`,
			"<user>hi</s><assistant>ab "},
		{"trimmed_tag_cuts_trailing_whitespace", `{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</s>{% endfor %}`,
			`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"ab \n"}],"add_generation_prompt":false,"continue_final_message":true}`,
			"<user>hi</s><assistant>ab"},
		{"python_whitespace_rstrip", `{% for m in messages %}{{ m.content.rstrip() }}{% endfor %}|`,
			`{"messages":[{"role":"assistant","content":"ab\u001c"}],"add_generation_prompt":false,"continue_final_message":true}`,
			"ab"},
		{"cut_at_last_tag", `{{ messages[-1].content }}|` + probe,
			`{"messages":[{"role":"assistant","content":"x"}],"add_generation_prompt":false,"continue_final_message":true}`,
			"xCONTINUE_FINAL_MESSAGE_TAG |<assistant>x"},
		{"text_parts_joined_then_cut", probe,
			`{"messages":[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"add_generation_prompt":false,"continue_final_message":true}`,
			"<assistant>a\nb"},
		{"final_user_message", probe,
			`{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false,"continue_final_message":true}`,
			"<user>hi"},
		{"empty_final_content", probe,
			`{"messages":[{"role":"assistant","content":null}],"add_generation_prompt":false,"continue_final_message":true}`,
			"<assistant>"},
		{"request_flags_win_over_kwargs", probe,
			`{"messages":[{"role":"assistant","content":"a"}],"add_generation_prompt":false,"continue_final_message":true,"chat_template_kwargs":{"continue_final_message":false,"add_generation_prompt":true}}`,
			"<assistant>a"},
		{"kwargs_cannot_turn_it_on", probe,
			`{"messages":[{"role":"assistant","content":"a"}],"add_generation_prompt":false,"chat_template_kwargs":{"continue_final_message":true}}`,
			"<assistant>a</s>"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk := newSyntheticWithTemplate(t, c.tmpl)
			got, err := tk.RenderChat([]byte(c.body), ChatOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

// TestContinueFinalMessageErrors: the refusals are request errors (400 in
// vLLM), never ErrUnsupported or ErrNoChatTemplate, which the router maps to
// its own failure.
func TestContinueFinalMessageErrors(t *testing.T) {
	const probe = `{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}`
	cases := []struct {
		name, tmpl, body, want string
	}{
		{"both_true", probe,
			`{"messages":[{"role":"assistant","content":"a"}],"add_generation_prompt":true,"continue_final_message":true}`,
			"Cannot set both `continue_final_message` and `add_generation_prompt` to True"},
		{"generation_prompt_by_default", probe,
			`{"messages":[{"role":"assistant","content":"a"}],"continue_final_message":true}`,
			"add_generation_prompt false"},
		{"kwargs_do_not_lift_the_default", probe,
			`{"messages":[{"role":"assistant","content":"a"}],"continue_final_message":true,"chat_template_kwargs":{"add_generation_prompt":false}}`,
			"add_generation_prompt false"},
		{"not_a_bool", probe,
			`{"messages":[{"role":"assistant","content":"a"}],"add_generation_prompt":false,"continue_final_message":"maybe"}`,
			"continue_final_message"},
		{"content_changed_by_template", `{% for m in messages %}{{ m.content | upper }}{% endfor %}`,
			`{"messages":[{"role":"assistant","content":"abc"}],"add_generation_prompt":false,"continue_final_message":true}`,
			`final message does not appear in the chat after applying the chat template (final message "abc")`},
		{"final_message_not_rendered", `{% for m in messages[:-1] %}{{ m.content }}{% endfor %}`,
			`{"messages":[{"role":"user","content":"u"},{"role":"assistant","content":"abc"}],"add_generation_prompt":false,"continue_final_message":true}`,
			"final message does not appear"},
		{"template_without_content", `{% for m in messages %}{{ m['role'] }}{% endfor %}`,
			`{"messages":[{"role":"assistant","content":"abc"}],"add_generation_prompt":false,"continue_final_message":true}`,
			`never mentions the "content" field`},
		{"empty_conversation", probe,
			`{"messages":[],"add_generation_prompt":false,"continue_final_message":true}`,
			"conversation is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk := newSyntheticWithTemplate(t, c.tmpl)
			_, err := tk.EncodeChat(nil, []byte(c.body), ChatOptions{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v, want one containing %q", err, c.want)
			}
			if errors.Is(err, ErrUnsupported) || errors.Is(err, ErrNoChatTemplate) {
				t.Errorf("error %v is a server-side refusal, want a request error", err)
			}
		})
	}
}

// TestPyIsSpace: Python 3.11's str.isspace over all of Unicode.
func TestPyIsSpace(t *testing.T) {
	python := []rune{0x9, 0xa, 0xb, 0xc, 0xd, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0, 0x1680,
		0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a,
		0x2028, 0x2029, 0x202f, 0x205f, 0x3000}
	var got []rune
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if pyIsSpace(r) {
			got = append(got, r)
		}
	}
	if !slices.Equal(got, python) {
		t.Errorf("pyIsSpace set %U, want %U", got, python)
	}
}
