package config

import (
	"strings"
	"testing"
	"time"
)

// TestReplicasBus: the replicas section builds the bus configuration with its credentials
// read from files or the environment, and every mistake names its field without showing a
// secret.
func TestReplicasBus(t *testing.T) {
	model := requireModel(t)
	dir := t.TempDir()
	token := writeFile(t, dir, "token", "tok-0123456789abcdef\n")
	pw := writeFile(t, dir, "pw", "hunter2-password\n")
	load := func(t *testing.T, replicas string) (*Config, error) {
		t.Helper()
		return loadArgs(t, "--tokenizer", model, "--config", writeFile(t, t.TempDir(), "c.yaml", workersYAML+"replicas:\n"+replicas))
	}
	t.Run("off_without_nats_url", func(t *testing.T) {
		c, err := load(t, "  lease: 5s\n")
		if err != nil || c.Bus != nil {
			t.Fatalf("Bus %+v, err %v; want nil, nil", c.Bus, err)
		}
	})
	t.Run("token_file", func(t *testing.T) {
		c, err := load(t, "  nats_url: nats://127.0.0.1:4222\n  id: router-a\n  lease: 5s\n  token_file: "+token+"\n")
		if err != nil {
			t.Fatal(err)
		}
		if b := c.Bus; b == nil || b.Token != "tok-0123456789abcdef" || b.Replica != "router-a" || b.Lease != 5*time.Second || b.Subject != "condisagg.bookings" ||
			b.ResyncInterval != 500*time.Millisecond {
			t.Fatalf("Bus %+v", c.Bus)
		}
	})
	t.Run("user_with_password_from_env_and_id_from_host", func(t *testing.T) {
		t.Setenv(EnvBusPassword, "from-env")
		c, err := load(t, "  nats_url: tls://nats-0:4222,tls://nats-1:4222\n  user: router\n")
		if err != nil {
			t.Fatal(err)
		}
		if b := c.Bus; b.User != "router" || b.Password != "from-env" || b.Replica == "" {
			t.Fatalf("Bus %+v", b)
		}
	})
	t.Run("flags", func(t *testing.T) {
		t.Setenv(EnvBusToken, "env-token")
		c, err := loadArgs(t, "--tokenizer", model, "--config", writeFile(t, t.TempDir(), "c.yaml", workersYAML),
			"--replicas-nats-url", "nats://127.0.0.1:4222", "--replicas-id", "r9")
		if err != nil {
			t.Fatal(err)
		}
		if c.Bus == nil || c.Bus.Token != "env-token" || c.Bus.Replica != "r9" {
			t.Fatalf("Bus %+v", c.Bus)
		}
	})
	for _, c := range []struct {
		name, replicas, want string
	}{
		{"open_bus", "  nats_url: nats://127.0.0.1:4222\n", "replicas.nats_url: nats://127.0.0.1:4222 needs credentials, the bus must not be open"},
		{"inline_credentials", "  nats_url: nats://router:hunter2@127.0.0.1:4222\n  token_file: " + token + "\n",
			"replicas.nats_url: nats://127.0.0.1:4222 carries credentials"},
		{"scheme", "  nats_url: http://127.0.0.1:4222\n  token_file: " + token + "\n", "replicas.nats_url: http://127.0.0.1:4222 must use the nats:// or tls:// scheme"},
		{"lease", "  nats_url: nats://127.0.0.1:4222\n  token_file: " + token + "\n  lease: 1h\n", "replicas.lease: 1h0m0s is outside [1s, 10m0s]"},
		{"resync_interval", "  nats_url: nats://127.0.0.1:4222\n  token_file: " + token + "\n  resync_interval: 1ms\n", "replicas.resync_interval: 1ms is outside [50ms, 1m0s]"},
		{"token_and_user", "  nats_url: nats://127.0.0.1:4222\n  token_file: " + token + "\n  user: u\n  password_file: " + pw + "\n",
			"replicas.token_file: " + token + " and replicas.user are exclusive"},
		{"user_without_password", "  nats_url: nats://127.0.0.1:4222\n  user: u\n", "replicas.password_file: \"\" must name a file"},
		{"missing_token_file", "  nats_url: nats://127.0.0.1:4222\n  token_file: /nonexistent/token\n", "replicas.token_file: /nonexistent/token must be a readable file"},
		{"cert_without_key", "  nats_url: tls://127.0.0.1:4222\n  tls_cert: " + token + "\n", "replicas.tls_cert/replicas.tls_key"},
		{"empty_subject", "  nats_url: nats://127.0.0.1:4222\n  token_file: " + token + "\n  subject: \"\"\n", "replicas.subject"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := load(t, c.replicas)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one with %q", err, c.want)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "tok-0123") {
				t.Fatalf("the error shows a secret: %v", err)
			}
		})
	}
}
