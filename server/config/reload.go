package config

import (
	"fmt"
	"os"
	"reflect"
	"time"
)

// Stamp identifies one version of the configuration file, to notice that it changed.
type Stamp struct {
	mod  time.Time
	size int64
}

// FileStamp is the file's Stamp; the zero Stamp when there is no file or it cannot be read.
func FileStamp(path string) Stamp {
	if path == "" {
		return Stamp{}
	}
	st, err := os.Stat(path)
	if err != nil {
		return Stamp{}
	}
	return Stamp{st.ModTime(), st.Size()}
}

// RestartNeeded names the changed fields a reload cannot apply ("" when there are none).
func RestartNeeded(old, cur *Config) string {
	var fields []string
	if !reflect.DeepEqual(old.Pool, cur.Pool) {
		fields = append(fields, "workers/pool")
	}
	if old.Tokenizer != cur.Tokenizer || old.CacheSegments != cur.CacheSegments || !reflect.DeepEqual(old.Models, cur.Models) ||
		old.UnknownModel != cur.UnknownModel {
		fields = append(fields, "model")
	}
	if old.Listen != cur.Listen || old.AdminListen != cur.AdminListen || old.AdminGRPC != cur.AdminGRPC ||
		old.TLSCert != cur.TLSCert || old.TLSKey != cur.TLSKey || !reflect.DeepEqual(old.File.AdminTokenFile, cur.File.AdminTokenFile) ||
		old.File.AdminTLSCert != cur.File.AdminTLSCert || old.File.AdminClientCA != cur.File.AdminClientCA ||
		old.File.TLSClientCA != cur.File.TLSClientCA || old.File.AllowUnauthenticatedListen != cur.File.AllowUnauthenticatedListen {
		fields = append(fields, "listeners/tls")
	}
	if old.MaxConnections != cur.MaxConnections || old.MaxStreamsPerConnection != cur.MaxStreamsPerConnection {
		fields = append(fields, "max_connections/max_streams_per_connection")
	}
	if old.MaxPretokenBytes != cur.MaxPretokenBytes {
		fields = append(fields, "max_pretoken_bytes")
	}
	if !reflect.DeepEqual(old.Kubernetes, cur.Kubernetes) {
		fields = append(fields, "discovery")
	}
	if old.DecisionConcurrency != cur.DecisionConcurrency {
		fields = append(fields, "decision_concurrency")
	}
	if old.KVEvents != cur.KVEvents {
		fields = append(fields, "router.kv_events")
	}
	if old.KVEventsMaxMessageBytes != cur.KVEventsMaxMessageBytes {
		fields = append(fields, "router.kv_events_max_message_bytes")
	}
	if len(fields) == 0 {
		return ""
	}
	return fmt.Sprintf("%v changed", fields)
}
