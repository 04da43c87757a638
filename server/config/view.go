package config

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Redacted marks a value the status page does not show.
const Redacted = "[redacted]"

// View is the file configuration (the file merged with the flags) as the admin status page
// shows it: every field by its YAML name, as maps, slices and scalars that encoding/json
// writes, with the value of every field that may hold a secret replaced by Redacted. The file
// itself holds no secret (the admin token and the TLS keys are read from the files it names,
// and file paths are shown); the rule in secretField guards fields added later.
func (f *File) View() (map[string]any, error) {
	text, err := yaml.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("config: view: %w", err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(text, &v); err != nil {
		return nil, fmt.Errorf("config: view: %w", err)
	}
	redact(v)
	return v, nil
}

// secretField reports whether a field of this name may hold a secret: a token, a secret, a
// password or a credential (not a file that holds one, and not the tokenizer).
func secretField(name string) bool {
	name = strings.ToLower(name)
	if strings.HasSuffix(name, "_file") {
		return false
	}
	return strings.HasSuffix(name, "token") || strings.Contains(name, "secret") ||
		strings.Contains(name, "password") || strings.Contains(name, "credential")
}

// redact replaces, at any depth, the non-empty values of secret fields.
func redact(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if secretField(k) && e != nil && e != "" {
				t[k] = Redacted
				continue
			}
			redact(e)
		}
	case []any:
		for _, e := range t {
			redact(e)
		}
	}
}
