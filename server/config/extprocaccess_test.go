package config

import (
	"strings"
	"testing"
)

// TestExtProcListenAccess: the ext_proc port binds loopback by default, and off loopback it
// needs mutual TLS or the operator's allow_unauthenticated_listen (issue 23 item 3).
func TestExtProcListenAccess(t *testing.T) {
	model := requireModel(t)
	dir := t.TempDir()
	cases := []struct {
		name, yaml, wantErr string
	}{
		{name: "default_is_loopback", yaml: ""},
		{name: "off_loopback_plaintext_is_refused", yaml: "listen: 0.0.0.0:9002\n",
			wantErr: "listen: 0.0.0.0:9002 is not a loopback address and the ext_proc port has no client authentication"},
		{name: "off_loopback_with_the_operators_statement_is_accepted", yaml: "listen: 0.0.0.0:9002\nallow_unauthenticated_listen: true\n"},
		{name: "client_ca_without_server_tls_is_refused", yaml: "tls_client_ca: ca.pem\n",
			wantErr: "tls_client_ca: ca.pem needs tls_cert and tls_key"},
		{name: "listener_bounds_are_checked", yaml: "max_connections: 0\nmax_streams_per_connection: 0\nmax_pretoken_bytes: -1\n" +
			"stream_request_timeout: 0s\nunanswered_booking_timeout: 0s\nmax_buffered_bytes: 5\n",
			wantErr: "max_connections: 0 is outside [1, 65536]"},
		{name: "model_max_model_len_is_checked", yaml: "max_model_len_placeholder", wantErr: "model.max_model_len: -1 must be >= 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			y := c.yaml
			m := "model: {tokenizer: " + model + ", block_size: 16}\n"
			if y == "max_model_len_placeholder" {
				y, m = "", "model: {tokenizer: "+model+", block_size: 16, max_model_len: -1}\n"
			}
			path := writeFile(t, dir, c.name+".yaml", y+m+workersYAML)
			cfg, err := loadArgs(t, "--config", path)
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.yaml == "" && cfg.Listen != DefaultListen {
					t.Fatalf("default listen %q, want %q", cfg.Listen, DefaultListen)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("err = %v, want %q", err, c.wantErr)
			}
			if c.name == "listener_bounds_are_checked" {
				for _, w := range []string{"max_streams_per_connection: 0", "max_pretoken_bytes: -1", "stream_request_timeout: 0s",
					"unanswered_booking_timeout: 0s", "max_buffered_bytes: 5 must be 0"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q:\n%v", w, err)
					}
				}
			}
		})
	}
}
