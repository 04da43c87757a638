package config

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestViewRedactsSecrets: the view keeps every field by its YAML name (paths included) and
// replaces the values of fields that may hold a secret, at any depth; the admin token read
// from its file is never in it.
func TestViewRedactsSecrets(t *testing.T) {
	model := requireModel(t)
	dir := t.TempDir()
	token := "0123456789abcdef-view-token"
	tokenFile := writeFile(t, dir, "admin.token", token+"\n")
	path := writeFile(t, dir, "c.yaml", "model: {tokenizer: "+model+", block_size: 16}\nadmin_token_file: "+tokenFile+
		"\nrouter: {conditional_disagg: true, kv_events: true, conditional_disagg_config: {eff_isl_threshold: 512}}\n"+workersYAML)
	c, err := loadArgs(t, "--config", path, "--failure-mode", "closed")
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.File.View()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{`"failure_mode":"closed"`, `"admin_token_file":"` + tokenFile + `"`, `"tokenizer":"` + model + `"`,
		`"eff_isl_threshold":512`, `"name":"decode-0"`, `"drain_timeout":"15m0s"`} {
		if !strings.Contains(text, want) {
			t.Errorf("view lacks %s:\n%s", want, text)
		}
	}
	if strings.Contains(text, token) {
		t.Fatalf("view shows the admin token:\n%s", text)
	}
	for _, c := range []struct {
		spec string
		in   map[string]any
		want string
	}{
		{"a_token_value_is_redacted", map[string]any{"api_token": "s3cr3t"}, `{"api_token":"[redacted]"}`},
		{"nested_secret_is_redacted", map[string]any{"workers": []any{map[string]any{"metrics_password": "pw", "name": "d"}}},
			`{"workers":[{"metrics_password":"[redacted]","name":"d"}]}`},
		{"an_empty_secret_stays_empty", map[string]any{"client_secret": ""}, `{"client_secret":""}`},
		{"a_file_naming_a_secret_is_shown", map[string]any{"admin_token_file": "/run/t"}, `{"admin_token_file":"/run/t"}`},
		{"the_tokenizer_is_no_token", map[string]any{"tokenizer": "/models/q"}, `{"tokenizer":"/models/q"}`},
	} {
		t.Run(c.spec, func(t *testing.T) {
			redact(c.in)
			if b, _ := json.Marshal(c.in); string(b) != c.want {
				t.Fatalf("%s, want %s", b, c.want)
			}
		})
	}
}
