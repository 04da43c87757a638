package pool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readServerInfo(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheckSGLang checks the engine-flag rules (README "Engines") against /server_info bodies
// rendered by SGLang 0.5.23's own build_server_info (testdata/gen_sglang_server_info.py).
func TestCheckSGLang(t *testing.T) {
	fit := WorkerInfo{ID: "sg-0", Engine: "sg-0", EngineKind: EngineSGLang, DataParallelSize: 2,
		KVEvents: "tcp://10.0.0.7:5557", KVReplay: "tcp://10.0.0.7:5567"}
	bound := fit
	bound.KVEvents, bound.KVReplay = "", ""
	other := fit
	other.DataParallelSize, other.KVEvents, other.KVReplay = 0, "tcp://10.0.0.7:6000", "tcp://10.0.0.7:6100"
	for _, c := range []struct {
		name, spec, file string
		w                WorkerInfo
		blockSize        int
		speculative      string
		want             []string
	}{
		{"all flags fit", "README Engines", "sglang_server_info.json", fit, 16, "", nil},
		{"bound subscriber: the event endpoints are not checked", "README Engines", "sglang_server_info.json", bound, 16, "", nil},
		{"page size, ranks and ports differ", "README Engines", "sglang_server_info.json", other, 32, "", []string{
			"--page-size is 16; start SGLang with --page-size 32, condisagg's block_size (one KV event block per page: stores of another size are refused, no credit)",
			"--dp-size is 2; the worker's data_parallel_size is 1: make them equal (each rank is its own worker, its own KV event stream and X-Data-Parallel-Rank)",
			"--kv-events-config publishes on port 5557, the worker's kv_events is tcp://10.0.0.7:6000: make the ports equal",
			"--kv-events-config replays on port 5567, the worker's kv_replay is tcp://10.0.0.7:6100: make the ports equal",
		}},
		{"EAGLE and speculative: eagle", "README Engines", "sglang_server_info_eagle.json", fit, 16, SpeculativeEagle, nil},
		{"EAGLE without speculative: eagle", "README Engines", "sglang_server_info_eagle.json", fit, 16, "", []string{
			"--speculative-algorithm is EAGLE: SGLang then keys its radix cache by token bigrams, which a model without speculative: eagle does not (its KV event stores are refused, no credit); set speculative: eagle on the model (model.speculative or models[i].speculative)",
		}},
		{"speculative: eagle without EAGLE", "README Engines", "sglang_server_info.json", fit, 16, SpeculativeEagle, []string{
			"--speculative-algorithm is not set, but the model has speculative: eagle (bigram keys): start SGLang with --speculative-algorithm EAGLE (or EAGLE3, NEXTN), or remove speculative: eagle from the model",
		}},
		{"SGLang's defaults", "README Engines", "sglang_server_info_defaults.json", fit, 16, "", []string{
			"--page-size is not set (SGLang then takes its attention backend's default, 1 for most); start SGLang with --page-size 16, condisagg's block_size (one KV event block per page)",
			"--enable-cache-report is off; start SGLang with --enable-cache-report (answers then carry usage.prompt_tokens_details.cached_tokens, which condisagg's feedback reads)",
			"--dp-size is 1; the worker's data_parallel_size is 2: make them equal (each rank is its own worker, its own KV event stream and X-Data-Parallel-Rank)",
			`--kv-events-config is not set, but the worker has kv_events tcp://10.0.0.7:5557; start SGLang with --kv-events-config '{"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5567"}'`,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			info, err := ParseSGLangServerInfo(readServerInfo(t, c.file))
			if err != nil {
				t.Fatal(err)
			}
			if info.Version != "0.5.23" {
				t.Fatalf("version %q, want the fixture's 0.5.23", info.Version)
			}
			err = CheckSGLang(info, c.w, c.blockSize, c.speculative)
			var got []string
			if err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}

func TestParseSGLangServerInfoRejects(t *testing.T) {
	for name, body := range map[string]string{
		"not json":        "<html>",
		"array":           "[1]",
		"vLLM-like body":  `{"version":"0.32.0"}`,
		"page_size wrong": `{"page_size":"16"}`,
		"oversized":       `{"page_size":16,"x":"` + strings.Repeat("a", maxServerInfoBytes) + `"}`,
	} {
		if _, err := ParseSGLangServerInfo([]byte(body)); err == nil || !strings.Contains(err.Error(), "sglang /server_info") {
			t.Errorf("%s: err %v, want a /server_info error", name, err)
		}
	}
}

func FuzzParseSGLangServerInfo(f *testing.F) {
	f.Add(readServerInfo(f, "sglang_server_info.json"))
	f.Add(readServerInfo(f, "sglang_server_info_defaults.json"))
	f.Add(readServerInfo(f, "sglang_server_info_eagle.json"))
	f.Add([]byte(`{"page_size":null,"kv_events":{"block_size":-1}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		info, err := ParseSGLangServerInfo(body)
		if err != nil {
			return
		}
		_ = CheckSGLang(info, WorkerInfo{DataParallelSize: 2, KVEvents: "tcp://h:1", KVReplay: "tcp://h:2"}, 16, SpeculativeEagle)
	})
}

// TestSGLangBigramAlgorithms: the --speculative-algorithm values SGLang 0.5.23 keys by bigrams
// (SpeculativeAlgorithm.is_eagle, NEXTN its alias of EAGLE), in any case, and some it does not.
func TestSGLangBigramAlgorithms(t *testing.T) {
	for algo, want := range map[string]bool{"EAGLE": true, "eagle3": true, "NEXTN": true, "FROZEN_KV_MTP": true,
		"STANDALONE": false, "NGRAM": false, "DFLASH": false, "": false} {
		info := SGLangServerInfo{SpeculativeAlgorithm: &algo}
		if got, _ := info.BigramKeys(); got != want {
			t.Errorf("%q: bigram keys %v, want %v", algo, got, want)
		}
	}
	other := "NGRAM"
	err := CheckSGLang(SGLangServerInfo{PageSize: new(16), EnableCacheReport: new(true), SpeculativeAlgorithm: &other},
		WorkerInfo{}, 16, SpeculativeEagle)
	if err == nil || err.Error() != "--speculative-algorithm is NGRAM, which keys SGLang's radix cache by plain tokens, but the model has speculative: eagle (bigram keys): remove speculative: eagle from the model" {
		t.Errorf("NGRAM under speculative: eagle: %v", err)
	}
}
