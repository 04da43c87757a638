package kube

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/condisagg/condisagg/pool"
)

// DefaultPort is the EndpointSlice port name of a worker's HTTP (OpenAI) server when an entry
// names none.
const DefaultPort = "http"

// Config is the `discovery.kubernetes` block of the serve file: the API client and the
// worker entries.
type Config struct {
	// Kubeconfig is a kubeconfig file for running outside the cluster; "" uses the in-cluster
	// configuration (the pod's service account).
	Kubeconfig string `yaml:"kubeconfig"`
	// Namespace is the namespace of entries that name none; "" is the router's own (in
	// cluster: its pod's; with a kubeconfig: its current context's, else "default").
	Namespace string `yaml:"namespace"`
	// Workers are the entries: each selects the EndpointSlices of one group of servers.
	Workers []Entry `yaml:"workers"`
}

// Entry selects one group of workers: every ready endpoint of the EndpointSlices its label
// selector matches is one server, registered as a config entry with that endpoint would be.
type Entry struct {
	// Name names the entry; its workers are "<name>@<ip>:<port>" (as a DNS-named entry's).
	Name string    `yaml:"name"`
	Role pool.Role `yaml:"role"`
	// Model is the models[] entry the workers serve; "" in the single-model form.
	Model string `yaml:"model"`
	// Namespace of the EndpointSlices; "" takes Config.Namespace.
	Namespace string `yaml:"namespace"`
	// Selector is a label selector of EndpointSlices, e.g.
	// "kubernetes.io/service-name=vllm-decode" (every slice of that Service).
	Selector string `yaml:"selector"`
	// Port is the name of the slice port of the HTTP server (default "http").
	Port string `yaml:"port"`
	// KVEventsPort and KVReplayPort name the slice ports of vLLM's KV event PUB and replay
	// ROUTER (rank 0's; rank r uses the port + r); "" = none.
	KVEventsPort string `yaml:"kv_events_port"`
	KVReplayPort string `yaml:"kv_replay_port"`
	// DataParallelSize, NumGPUBlocks and MaxNumBatchedTokens are those of a workers entry
	// (pool.WorkerConfig), for every server the entry finds.
	DataParallelSize    int   `yaml:"data_parallel_size"`
	NumGPUBlocks        int64 `yaml:"num_gpu_blocks"`
	MaxNumBatchedTokens int64 `yaml:"max_num_batched_tokens"`
}

// WithDefaults fills every entry's port.
func (c Config) WithDefaults() Config {
	c.Workers = append([]Entry(nil), c.Workers...)
	for i := range c.Workers {
		if c.Workers[i].Port == "" {
			c.Workers[i].Port = DefaultPort
		}
	}
	return c
}

// Validate returns every problem of c (after defaults), joined, each as
// "<prefix>.<field>: <value> <rule>"; prefix is where c sits in the file
// ("discovery.kubernetes").
func (c Config) Validate(prefix string) error {
	c = c.WithDefaults()
	var errs []error
	bad := func(field, value, rule string) {
		errs = append(errs, fmt.Errorf("config: %s.%s: %s %s", prefix, field, value, rule))
	}
	if c.Namespace != "" && len(validation.IsDNS1123Label(c.Namespace)) > 0 {
		bad("namespace", strconv.Quote(c.Namespace), "must be a namespace name (a DNS-1123 label)")
	}
	if len(c.Workers) == 0 {
		bad("workers", "[]", "must list at least one entry (or remove discovery.kubernetes)")
	}
	names := map[string]bool{}
	for i, e := range c.Workers {
		e.validate(func(field, value, rule string) { bad("workers["+strconv.Itoa(i)+"]."+field, value, rule) }, names)
	}
	return errors.Join(errs...)
}

func (e Entry) validate(bad func(field, value, rule string), names map[string]bool) {
	switch {
	case e.Name == "":
		bad("name", `""`, "must name the entry (its workers are <name>@<ip>:<port>)")
	case strings.ContainsAny(e.Name, "@/ \t\n"):
		bad("name", strconv.Quote(e.Name), "must not contain '@', '/' or spaces")
	case names[e.Name]:
		bad("name", strconv.Quote(e.Name), "is a duplicate")
	}
	names[e.Name] = true
	if e.Role != pool.RolePrefill && e.Role != pool.RoleDecode {
		bad("role", strconv.Quote(string(e.Role)), "must be one of prefill, decode")
	}
	if e.Namespace != "" && len(validation.IsDNS1123Label(e.Namespace)) > 0 {
		bad("namespace", strconv.Quote(e.Namespace), "must be a namespace name (a DNS-1123 label)")
	}
	if strings.TrimSpace(e.Selector) == "" {
		bad("selector", `""`, "must be a label selector of EndpointSlices, e.g. kubernetes.io/service-name=vllm-decode "+
			"(an empty one would take every slice of the namespace)")
	} else if _, err := labels.Parse(e.Selector); err != nil {
		bad("selector", strconv.Quote(e.Selector), "is not a label selector: "+err.Error())
	}
	for _, p := range []struct{ field, v string }{{"port", e.Port}, {"kv_events_port", e.KVEventsPort}, {"kv_replay_port", e.KVReplayPort}} {
		if p.v != "" && len(validation.IsValidPortName(p.v)) > 0 {
			bad(p.field, strconv.Quote(p.v), "must be the name of a Service port (an IANA service name: at most 15 of a-z, 0-9 and '-')")
		}
	}
	switch {
	case e.KVReplayPort != "" && e.KVEventsPort == "":
		bad("kv_replay_port", strconv.Quote(e.KVReplayPort), "needs kv_events_port (the replay ROUTER serves the event PUB's stream)")
	case e.KVEventsPort != "" && (e.KVEventsPort == e.Port || e.KVEventsPort == e.KVReplayPort):
		bad("kv_events_port", strconv.Quote(e.KVEventsPort), "must differ from port and kv_replay_port")
	case e.KVReplayPort != "" && e.KVReplayPort == e.Port:
		bad("kv_replay_port", strconv.Quote(e.KVReplayPort), "must differ from port")
	}
	if e.DataParallelSize < 0 || e.DataParallelSize > pool.MaxDataParallelSize {
		bad("data_parallel_size", strconv.Itoa(e.DataParallelSize),
			"must be in [1, "+strconv.Itoa(pool.MaxDataParallelSize)+"] (vLLM --data-parallel-size; 0 means 1)")
	}
	if e.NumGPUBlocks < 0 {
		bad("num_gpu_blocks", strconv.FormatInt(e.NumGPUBlocks, 10), "must be >= 0")
	}
	if e.MaxNumBatchedTokens < 0 {
		bad("max_num_batched_tokens", strconv.FormatInt(e.MaxNumBatchedTokens, 10), "must be >= 0")
	}
}

// Roles reports which roles c's entries discover.
func (c Config) Roles() (decode, prefill bool) {
	for _, e := range c.Workers {
		decode = decode || e.Role == pool.RoleDecode
		prefill = prefill || e.Role == pool.RolePrefill
	}
	return decode, prefill
}
