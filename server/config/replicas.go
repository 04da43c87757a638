package config

import (
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/condisagg/condisagg/bookbus"
)

// Environment variables that may hold the bus credentials instead of a file (a Kubernetes
// Secret mounted as env). The file wins when both are set.
const (
	EnvBusToken    = "CONDISAGG_BUS_TOKEN"
	EnvBusPassword = "CONDISAGG_BUS_PASSWORD"
)

// The range of replicas.lease: below 1 s a heartbeat every lease/3 would load the bus for
// nothing; above 10 min a dead replica's load would linger (pool.MaxPeerLease).
const (
	MinReplicaLease = time.Second
	MaxReplicaLease = 10 * time.Minute
)

// The range of replicas.resync_interval: a re-send is every open booking of the replica, so
// below 50 ms a fleet-wide reconnect would flood the bus; above a minute a joiner would
// undercount its peers' load for that long.
const (
	MinResyncInterval = 50 * time.Millisecond
	MaxResyncInterval = time.Minute
)

// ReplicasFile is the replicas section: the bus that shares booked load between router
// replicas (bookbus; without nats_url each replica books only what it routes), and how this
// replica starts from a running peer's index (WarmFile, the warm start of package server).
type ReplicasFile struct {
	WarmFile `yaml:",inline"`
	NATSURL  string        `yaml:"nats_url"`
	ID       string        `yaml:"id"`
	Lease    time.Duration `yaml:"lease"`
	// ResyncInterval is bookbus.Config.ResyncInterval.
	ResyncInterval time.Duration `yaml:"resync_interval"`
	Subject        string        `yaml:"subject"`
	TokenFile      string        `yaml:"token_file"`
	User           string        `yaml:"user"`
	PasswordFile   string        `yaml:"password_file"`
	TLSCA          string        `yaml:"tls_ca"`
	TLSCert        string        `yaml:"tls_cert"`
	TLSKey         string        `yaml:"tls_key"`
}

// busConfig validates the replicas section and builds the bus configuration (without its
// Metrics and Logger, which serve adds); nil when nats_url is unset.
func busConfig(r ReplicasFile, bad func(field string, value any, rule string)) *bookbus.Config {
	if r.NATSURL == "" {
		return nil
	}
	c := &bookbus.Config{URL: r.NATSURL, Replica: r.ID, Lease: r.Lease, ResyncInterval: r.ResyncInterval, Subject: r.Subject, User: r.User,
		CAFile: r.TLSCA, CertFile: r.TLSCert, KeyFile: r.TLSKey}
	for _, u := range strings.Split(r.NATSURL, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		switch {
		case err != nil || p.Host == "":
			bad("replicas.nats_url", bookbus.Redact(u), "must be nats://host:port or tls://host:port (comma-separated for a cluster)")
		case p.Scheme != "nats" && p.Scheme != "tls":
			bad("replicas.nats_url", bookbus.Redact(u), "must use the nats:// or tls:// scheme")
		case p.User != nil:
			bad("replicas.nats_url", bookbus.Redact(u), "carries credentials: give them in replicas.token_file or replicas.user and replicas.password_file (or $"+EnvBusToken+", $"+EnvBusPassword+")")
		}
	}
	if c.Replica == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			bad("replicas.id", `""`, "must be set: the host name cannot be read")
		}
		c.Replica = h
	}
	if len(c.Replica) > 255 {
		bad("replicas.id", c.Replica[:32]+"…", "must be at most 255 bytes")
	}
	c.Token = secret(r.TokenFile, EnvBusToken, "replicas.token_file", bad)
	if r.User != "" {
		c.Password = secret(r.PasswordFile, EnvBusPassword, "replicas.password_file", bad)
		if c.Password == "" {
			bad("replicas.password_file", `""`, "must name a file holding the password of replicas.user (or set $"+EnvBusPassword+")")
		}
	} else if r.PasswordFile != "" {
		bad("replicas.password_file", r.PasswordFile, "needs replicas.user")
	}
	if c.Token != "" && r.User != "" {
		bad("replicas.token_file", r.TokenFile, "and replicas.user are exclusive: the bus takes a token or a user and password")
	}
	if (r.TLSCert == "") != (r.TLSKey == "") {
		bad("replicas.tls_cert/replicas.tls_key", r.TLSCert+"/"+r.TLSKey, "must be given together")
	}
	for _, f := range []struct{ field, path string }{{"replicas.tls_ca", r.TLSCA}, {"replicas.tls_cert", r.TLSCert}, {"replicas.tls_key", r.TLSKey}} {
		if f.path != "" {
			if _, err := os.Stat(f.path); err != nil {
				bad(f.field, f.path, "must be a readable file: "+err.Error())
			}
		}
	}
	if c.Token == "" && r.User == "" && r.TLSCert == "" {
		bad("replicas.nats_url", bookbus.Redact(r.NATSURL), "needs credentials, the bus must not be open: set replicas.token_file ($"+EnvBusToken+
			"), replicas.user with replicas.password_file ($"+EnvBusPassword+"), or replicas.tls_cert and replicas.tls_key")
	}
	return c
}

// secret reads one credential from file (trimmed), else from the environment variable env.
func secret(file, env, field string, bad func(field string, value any, rule string)) string {
	if file == "" {
		return strings.TrimSpace(os.Getenv(env))
	}
	b, err := os.ReadFile(file)
	s := strings.TrimSpace(string(b))
	switch {
	case err != nil:
		bad(field, file, "must be a readable file: "+err.Error())
	case s == "" || strings.ContainsAny(s, "\r\n"):
		bad(field, file, "must hold one line, not empty")
	}
	return s
}
