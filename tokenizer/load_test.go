package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadRefusesUnsupportedFeatures: a file that uses a feature we do not
// implement is refused at load with an error naming the feature.
func TestLoadRefusesUnsupportedFeatures(t *testing.T) {
	base, err := os.ReadFile(filepath.Join("testdata", "synthetic_bytelevel_tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		path    []string // where to put value
		value   string
		feature string // must appear in the error
	}{
		{"wordpiece_model", []string{"model", "type"}, `"WordPiece"`, "WordPiece"},
		{"bpe_dropout", []string{"model", "dropout"}, `0.1`, "dropout"},
		{"continuing_subword_prefix", []string{"model", "continuing_subword_prefix"}, `"##"`, "continuing_subword_prefix"},
		{"end_of_word_suffix", []string{"model", "end_of_word_suffix"}, `"</w>"`, "end_of_word_suffix"},
		{"lowercase_normalizer", []string{"normalizer"}, `{"type":"Lowercase"}`, "Lowercase"},
		{"regex_replace", []string{"normalizer"}, `{"type":"Replace","pattern":{"Regex":"a+"},"content":"b"}`, "Replace with a regex"},
		{"metaspace_scheme", []string{"pre_tokenizer"}, `{"type":"Metaspace","replacement":"▁","prepend_scheme":"sometimes","split":true}`, "sometimes"},
		{"whitespace_pretok", []string{"pre_tokenizer"}, `{"type":"Whitespace"}`, "Whitespace"},
		{"split_removed", []string{"pre_tokenizer"}, `{"type":"Split","pattern":{"Regex":"a"},"behavior":"Removed","invert":false}`, "Removed"},
		{"split_invert", []string{"pre_tokenizer"}, `{"type":"Split","pattern":{"Regex":"a"},"behavior":"Isolated","invert":true}`, "invert"},
		{"pretok_after_bytelevel", []string{"pre_tokenizer"}, `{"type":"Sequence","pretokenizers":[{"type":"ByteLevel"},{"type":"Digits"}]}`, "after ByteLevel"},
		{"roberta_post", []string{"post_processor"}, `{"type":"RobertaProcessing"}`, "RobertaProcessing"},
		{"truncation", []string{"truncation"}, `{"max_length":8}`, "truncation"},
		{"padding", []string{"padding"}, `{"strategy":"BatchLongest"}`, "padding"},
		{"unknown_key", []string{"extra_feature"}, `1`, "extra_feature"},
		{"template_pair_only_b", []string{"post_processor"}, `{"type":"TemplateProcessing","single":[{"Sequence":{"id":"B","type_id":0}}],"special_tokens":{}}`, "sequence \"B\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := setJSONPath(t, base, c.path, c.value)
			_, err := New(data, nil, "", Options{})
			if err == nil {
				t.Fatalf("New accepted %s=%s", strings.Join(c.path, "."), c.value)
			}
			if !strings.Contains(err.Error(), c.feature) {
				t.Errorf("error %q does not name %q", err, c.feature)
			}
			if c.name != "template_pair_only_b" && !errors.Is(err, ErrUnsupported) {
				t.Errorf("error %q is not ErrUnsupported", err)
			}
		})
	}
}

// setJSONPath returns data with the value at path replaced by raw JSON.
func setJSONPath(t *testing.T, data []byte, path []string, raw string) []byte {
	t.Helper()
	var root map[string]any
	if err := json.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatalf("bad test value %s: %v", raw, err)
	}
	m := root
	for _, k := range path[:len(path)-1] {
		m = m[k].(map[string]any)
	}
	m[path[len(path)-1]] = v
	out, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("Load(empty dir) error = %v, want one naming tokenizer.json", err)
	}
	for _, bad := range []string{``, `[]`, `{"model":null}`, `{"model":{"type":"BPE","vocab":{"a":0},"merges":["a b"]}}`} {
		if _, err := New([]byte(bad), nil, "", Options{}); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
}

// TestLoadModelDirectory checks the config-driven parts of both real models.
func TestLoadModelDirectory(t *testing.T) {
	cases := []struct {
		model      string
		bos, eos   string
		prefix     []uint32
		hasChatTpl bool
	}{
		{"qwen3", "", "<|im_end|>", nil, true},
		{"llama3", "<|begin_of_text|>", "<|eot_id|>", []uint32{128000}, true},
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			tk := loadModel(t, c.model, Options{})
			if tk.cfg.bosToken != c.bos || tk.cfg.eosToken != c.eos {
				t.Errorf("bos/eos = %q/%q, want %q/%q", tk.cfg.bosToken, tk.cfg.eosToken, c.bos, c.eos)
			}
			if !equalIDs(tk.prefix, c.prefix) {
				t.Errorf("template prefix = %v, want %v", tk.prefix, c.prefix)
			}
			if (tk.chat != nil) != c.hasChatTpl {
				t.Errorf("chat template loaded = %v, want %v", tk.chat != nil, c.hasChatTpl)
			}
		})
	}
}

// TestChatTemplateFileOverridesConfig: chat_template.jinja wins over tokenizer_config.json.
func TestChatTemplateFileOverridesConfig(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", "synthetic_bytelevel_tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("tokenizer.json", string(src))
	write("tokenizer_config.json", `{"bos_token":{"content":"<bos>"},"chat_template":[{"name":"default","template":"config"}]}`)
	tk, err := Load(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := tk.RenderChat([]byte(`{"messages":[]}`), ChatOptions{}); got != "config" {
		t.Errorf("named default template rendered %q, want %q", got, "config")
	}
	write("chat_template.jinja", "{{ bos_token }}file")
	if tk, err = Load(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := tk.RenderChat([]byte(`{"messages":[]}`), ChatOptions{}); got != "<bos>file" {
		t.Errorf("chat_template.jinja rendered %q, want %q", got, "<bos>file")
	}
}

func TestOptionsValidate(t *testing.T) {
	err := Options{CacheSegments: -1, CacheBytes: -2}.Validate()
	if err == nil || !strings.Contains(err.Error(), "CacheSegments: -1") || !strings.Contains(err.Error(), "CacheBytes: -2") {
		t.Errorf("Validate() = %v, want both fields reported", err)
	}
	if err := (Options{CacheSegments: 10}).Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
	if _, err := New([]byte(`{}`), nil, "", Options{CacheSegments: -1}); err == nil || !strings.Contains(err.Error(), "CacheSegments") {
		t.Errorf("New with bad options: %v", err)
	}
}

// TestLoadChatTemplateFile: Options.ChatTemplateFile replaces the model directory's chat
// template (vLLM --chat-template); a missing file fails the load.
func TestLoadChatTemplateFile(t *testing.T) {
	dir := filepath.Join("testdata", "models", "qwen3")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatalf("model qwen3 missing (%v): run tokenizer/testdata/fetch_models.sh", err)
	}
	tmpl := filepath.Join(t.TempDir(), "plain.jinja")
	if err := os.WriteFile(tmpl, []byte("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"), 0o644); err != nil {
		t.Fatal(err)
	}
	tk, err := Load(dir, Options{ChatTemplateFile: tmpl})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"Hello world"}]}`)
	got, err := tk.EncodeChat(nil, body, ChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := tk.Encode(nil, "user: Hello world\n", WithoutSpecialTokens)
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("rendered with the file's template: %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("rendered with the file's template: %v, want %v", got, want)
		}
	}
	if _, err := Load(dir, Options{ChatTemplateFile: filepath.Join(t.TempDir(), "missing.jinja")}); err == nil {
		t.Fatal("missing chat template file accepted")
	}
}
