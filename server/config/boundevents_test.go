package config

import (
	"reflect"
	"strings"
	"testing"
)

// TestBoundEvents: router.kv_events_bind with router.kv_events_topics maps each publisher's
// topic to a worker rank of its model; the streams are grouped by model.
func TestBoundEvents(t *testing.T) {
	model := requireModel(t)
	path := writeFile(t, t.TempDir(), "c.yaml", `
router:
  kv_events: true
  kv_events_bind: tcp://127.0.0.1:5557
  kv_events_topics:
    - {topic: "kv@10.0.0.1@m", worker: d0}
    - {topic: "kv@10.0.0.2@m", worker: d1, rank: 1, kv_replay: "tcp://10.0.0.2:5568"}
models:
  - name: m
    tokenizer: `+model+`
    workers:
      - {name: d0, role: decode, endpoint: 10.0.0.1:8000}
      - {name: p0, role: prefill, endpoint: 10.0.0.9:8000, kv_events: "tcp://10.0.0.9:5557"}
  - name: n
    tokenizer: `+model+`
    workers:
      - {name: d1, role: decode, endpoint: 10.0.0.2:8000, data_parallel_size: 2}
`)
	c, err := loadArgs(t, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	want := &BoundEvents{Endpoint: "tcp://127.0.0.1:5557", Streams: [][]BoundStream{
		{{Topic: "kv@10.0.0.1@m", Worker: "d0"}},
		{{Topic: "kv@10.0.0.2@m", Worker: "d1", Rank: 1, KVReplay: "tcp://10.0.0.2:5568"}},
	}}
	if !reflect.DeepEqual(c.BoundEvents, want) {
		t.Fatalf("bound events %+v, want %+v", c.BoundEvents, want)
	}
	// The flag sets the endpoint too.
	c, err = loadArgs(t, "--config", path, "--router-kv-events-bind", "tcp://0.0.0.0:6000")
	if err != nil || c.BoundEvents.Endpoint != "tcp://0.0.0.0:6000" {
		t.Fatalf("--router-kv-events-bind: %v %+v", err, c)
	}
	if n := RestartNeeded(c, mustLoad(t, path)); !strings.Contains(n, "router.kv_events") {
		t.Fatalf("a changed bind endpoint: RestartNeeded = %q, want router.kv_events", n)
	}
}

func mustLoad(t *testing.T, path string) *Config {
	t.Helper()
	c, err := loadArgs(t, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBoundEventsErrors: each mistake is named by its field, with the fix.
func TestBoundEventsErrors(t *testing.T) {
	model := requireModel(t)
	const workers = `
workers:
  - {name: d0, role: decode, endpoint: 10.0.0.1:8000}
  - {name: d1, role: decode, endpoint: 10.0.0.2:8000, kv_events: "tcp://10.0.0.2:5557"}
  - {name: dns, role: decode, endpoint: engine.example:8000}
`
	for _, c := range []struct {
		spec, router string
		want         []string
	}{
		{"topics_need_a_bind_endpoint", `kv_events: true
  kv_events_topics: [{topic: a, worker: d0}]`,
			[]string{"router.kv_events_topics: 1 entries need router.kv_events_bind (--router-kv-events-bind)"}},
		{"a_bind_endpoint_needs_topics", `kv_events: true
  kv_events_bind: tcp://127.0.0.1:5557`,
			[]string{`router.kv_events_bind: "tcp://127.0.0.1:5557" needs router.kv_events_topics`}},
		{"bind_needs_kv_events", `kv_events_bind: tcp://127.0.0.1:5557
  kv_events_topics: [{topic: a, worker: d0}]`,
			[]string{"needs router.kv_events: true"}},
		{"bind_endpoint_is_tcp_ip_port", `kv_events: true
  kv_events_bind: tcp://router.example:5557
  kv_events_topics: [{topic: a, worker: d0}]`,
			[]string{`router.kv_events_bind: "tcp://router.example:5557" must be tcp://ip:port`, "an IP or *"}},
		{"bind_endpoint_has_a_port", `kv_events: true
  kv_events_bind: tcp://127.0.0.1
  kv_events_topics: [{topic: a, worker: d0}]`,
			[]string{"a port in [1, 65535]"}},
		{"unknown_worker_duplicate_topic_bad_rank", `kv_events: true
  kv_events_bind: tcp://127.0.0.1:5557
  kv_events_topics:
    - {topic: a, worker: d0}
    - {topic: a, worker: ghost}
    - {topic: b, worker: d0, rank: 1}
    - {topic: c, worker: d0}
    - {topic: "", worker: d0, kv_replay: "10.0.0.1:5567"}`,
			[]string{
				`router.kv_events_topics[1].topic: "a" is already router.kv_events_topics[0]`,
				`router.kv_events_topics[1].worker: "ghost" is not the name of a configured worker`,
				"router.kv_events_topics[2].rank: 1 must be in [0, 0]",
				`router.kv_events_topics[3].worker: "d0" rank 0 is already router.kv_events_topics[0]`,
				`router.kv_events_topics[4].topic: "" must be the topic`,
				`router.kv_events_topics[4].kv_replay: "10.0.0.1:5567" must be tcp://host:port`,
			}},
		{"a_worker_connects_or_is_bound_not_both", `kv_events: true
  kv_events_bind: tcp://127.0.0.1:5557
  kv_events_topics: [{topic: a, worker: d1}]`,
			[]string{`router.kv_events_topics[0].worker: "d1" already subscribes to tcp://10.0.0.2:5557 (kv_events)`}},
		{"a_dns_worker_cannot_be_bound", `kv_events: true
  kv_events_bind: tcp://127.0.0.1:5557
  kv_events_topics: [{topic: a, worker: dns}]`,
			[]string{`router.kv_events_topics[0].worker: "dns" has a DNS endpoint`}},
	} {
		t.Run(c.spec, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "c.yaml", "model: {tokenizer: "+model+"}\nrouter:\n  "+c.router+workers)
			_, err := loadArgs(t, "--config", path)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}
