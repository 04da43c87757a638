package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Limits on the files read at load, so a bad model directory cannot exhaust memory.
const (
	maxTokenizerJSONBytes = 64 << 20
	maxConfigBytes        = 4 << 20
)

// Options configures Load. The zero value is valid.
type Options struct {
	// CacheSegments bounds the prefix-aware segment cache in entries; 0 disables it.
	CacheSegments int
	// CacheBytes bounds the text held by the segment cache; 0 means 64 MiB when
	// CacheSegments > 0.
	CacheBytes int
	// ChatTemplateFile, when set, is a Jinja file Load uses instead of the directory's chat
	// template (vLLM --chat-template).
	ChatTemplateFile string
}

// Validate reports every invalid field of o at once.
func (o Options) Validate() error {
	var errs []error
	if o.CacheSegments < 0 {
		errs = append(errs, fmt.Errorf("tokenizer: options: CacheSegments: %d: must be >= 0", o.CacheSegments))
	}
	if o.CacheBytes < 0 {
		errs = append(errs, fmt.Errorf("tokenizer: options: CacheBytes: %d: must be >= 0", o.CacheBytes))
	}
	return errors.Join(errs...)
}

// Load reads a model directory the way Hugging Face does: tokenizer.json, plus
// tokenizer_config.json (chat_template, bos_token, eos_token) and a separate
// chat_template.jinja when present (it takes precedence; Options.ChatTemplateFile takes
// precedence over both).
func Load(dir string, opts Options) (*Tokenizer, error) {
	tj, err := readLimited(filepath.Join(dir, "tokenizer.json"), maxTokenizerJSONBytes)
	if err != nil {
		return nil, err
	}
	cfg, err := readLimited(filepath.Join(dir, "tokenizer_config.json"), maxConfigBytes)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var tmpl []byte
	if opts.ChatTemplateFile != "" {
		if tmpl, err = readLimited(opts.ChatTemplateFile, maxConfigBytes); err != nil {
			return nil, err
		}
	} else if tmpl, err = readLimited(filepath.Join(dir, "chat_template.jinja"), maxConfigBytes); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return New(tj, cfg, string(tmpl), opts)
}

// New builds a Tokenizer from the contents of tokenizer.json, tokenizer_config.json
// (may be nil) and a chat template that overrides the config's (may be empty).
func New(tokenizerJSON, tokenizerConfig []byte, chatTemplate string, opts Options) (*Tokenizer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	t, err := newTokenizer(tokenizerJSON)
	if err != nil {
		return nil, err
	}
	if len(tokenizerConfig) > 0 {
		if t.cfg, err = parseConfig(tokenizerConfig); err != nil {
			return nil, err
		}
	}
	if chatTemplate != "" {
		t.cfg.chatTemplate = chatTemplate
	}
	if t.cfg.chatTemplate != "" {
		if t.chat, err = compileChatTemplate(t.cfg.chatTemplate); err != nil {
			return nil, err
		}
		if strings.IndexByte(t.cfg.bosToken+t.cfg.eosToken, markerByte) >= 0 {
			t.chat.splice = false // the template prints them: they could fake a marker
		}
	}
	if opts.CacheSegments > 0 {
		t.cache = newSegmentCache(opts.CacheSegments, opts.CacheBytes)
	}
	return t, nil
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: open %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("tokenizer: stat %s: %w", path, err)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("tokenizer: %s is %d bytes, over the %d byte limit", path, st.Size(), limit)
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil && st.Size() > 0 {
		return nil, fmt.Errorf("tokenizer: read %s: %w", path, err)
	}
	return data, nil
}

// parseConfig reads the fields of tokenizer_config.json that change encoding or
// chat rendering.
func parseConfig(data []byte) (modelConfig, error) {
	var raw struct {
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return modelConfig{}, fmt.Errorf("tokenizer: parse tokenizer_config.json: %w", err)
	}
	var cfg modelConfig
	var err error
	if cfg.bosToken, err = tokenString(raw.BOS); err != nil {
		return cfg, fmt.Errorf("tokenizer: tokenizer_config.json bos_token: %w", err)
	}
	if cfg.eosToken, err = tokenString(raw.EOS); err != nil {
		return cfg, fmt.Errorf("tokenizer: tokenizer_config.json eos_token: %w", err)
	}
	if cfg.chatTemplate, err = templateString(raw.ChatTemplate); err != nil {
		return cfg, fmt.Errorf("tokenizer: tokenizer_config.json chat_template: %w", err)
	}
	return cfg, nil
}

// tokenString accepts a token given as a string, null, or an AddedToken object.
func tokenString(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", err
	}
	return obj.Content, nil
}

// templateString accepts a template string or a list of named templates, of which
// it uses "default" as transformers does.
func templateString(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", err
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", fmt.Errorf("named templates without \"default\": %w", ErrUnsupported)
}
