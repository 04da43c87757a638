package config

import "time"

// WarmFile holds the replicas.warm_* settings: the peer's Admin gRPC address, how to
// authenticate to it, and the bounds of the copy.
type WarmFile struct {
	WarmFrom      string        `yaml:"warm_from"`
	WarmTokenFile string        `yaml:"warm_token_file"`
	WarmTLS       bool          `yaml:"warm_tls"`
	WarmCAFile    string        `yaml:"warm_ca_file"`
	WarmTimeout   time.Duration `yaml:"warm_timeout"`
	WarmMaxBytes  int64         `yaml:"warm_max_bytes"`
}
