package config

import (
	"strings"
	"testing"

	"github.com/condisagg/condisagg/pool"
)

// TestDiscoveryConfig: discovery.kubernetes is parsed into Config.Kubernetes and each model's
// entries, and every mistake is named with its field and fix (docs/discovery.md).
func TestDiscoveryConfig(t *testing.T) {
	model := requireModel(t)
	dir := t.TempDir()
	ok := writeFile(t, dir, "ok.yaml", `model: {tokenizer: `+model+`}
discovery:
  kubernetes:
    namespace: llm
    workers:
      - {name: decode, role: decode, selector: kubernetes.io/service-name=vllm-decode, kv_events_port: kv-events}
      - {name: prefill, role: prefill, selector: "app=vllm,role in (prefill)", port: sidecar}
`)
	c, err := loadArgs(t, "--config", ok)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kubernetes == nil || c.Kubernetes.Namespace != "llm" || len(c.Models[0].Discovery) != 2 ||
		c.Models[0].Discovery[0].Port != "http" || c.Models[0].Discovery[1].Role != pool.RolePrefill {
		t.Fatalf("discovery = %+v, model entries %+v", c.Kubernetes, c.Models[0].Discovery)
	}
	if !c.Settings.Policy.DistinctPools {
		t.Error("discovered prefill and decode roles must count as distinct pools")
	}
	bad := writeFile(t, dir, "bad.yaml", `model: {tokenizer: `+model+`}
workers:
  - {name: decode, role: decode, endpoint: 10.0.0.1:8000}
discovery:
  kubernetes:
    namespace: Not_A_Namespace
    workers:
      - {name: decode, role: decode, selector: "app=vllm"}
      - {name: "a@b", role: both, selector: "", port: "way-too-long-port-name", kv_replay_port: kv-replay, model: other}
      - {name: dp, role: decode, selector: "app in (", data_parallel_size: 2000, num_gpu_blocks: -1}
`)
	_, err = loadArgs(t, "--config", bad)
	if err == nil {
		t.Fatal("bad discovery config loaded")
	}
	for _, want := range []string{
		`config: discovery.kubernetes.namespace: "Not_A_Namespace" must be a namespace name (a DNS-1123 label)`,
		`config: discovery.kubernetes.workers[0].name: "decode" is already a worker of the same model; use another name`,
		`config: discovery.kubernetes.workers[1].name: "a@b" must not contain '@', '/' or spaces`,
		`config: discovery.kubernetes.workers[1].role: "both" must be one of prefill, decode`,
		`config: discovery.kubernetes.workers[1].selector: "" must be a label selector of EndpointSlices, e.g. kubernetes.io/service-name=vllm-decode`,
		`config: discovery.kubernetes.workers[1].port: "way-too-long-port-name" must be the name of a Service port`,
		`config: discovery.kubernetes.workers[1].kv_replay_port: "kv-replay" needs kv_events_port`,
		`config: discovery.kubernetes.workers[1].model: "other" must be "" or model.name in the single-model form`,
		`config: discovery.kubernetes.workers[2].selector: "app in (" is not a label selector`,
		`config: discovery.kubernetes.workers[2].data_parallel_size: 2000 must be in [1, 1024]`,
		`config: discovery.kubernetes.workers[2].num_gpu_blocks: -1 must be >= 0`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	typo := writeFile(t, dir, "typo.yaml", `model: {tokenizer: `+model+`}
discovery: {kubernetes: {workers: [{name: d, role: decode, selector: a=b, selektor: x}]}}
`)
	if _, err := loadArgs(t, "--config", typo); err == nil || !strings.Contains(err.Error(), "field selektor not found") {
		t.Errorf("misspelt key: %v", err)
	}
	none := writeFile(t, dir, "none.yaml", `model: {tokenizer: `+model+`}
discovery: {kubernetes: {workers: []}}
`)
	if _, err := loadArgs(t, "--config", none); err == nil || !strings.Contains(err.Error(), "discovery.kubernetes.workers: [] must list at least one entry") ||
		!strings.Contains(err.Error(), "must list at least one decode worker (or discover workers with discovery.kubernetes)") {
		t.Errorf("empty discovery: %v", err)
	}
}
