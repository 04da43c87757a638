package pool

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// SGLangServerInfoPath is SGLang's startup configuration endpoint (GET; http_server.py
// server_info: the resolved ServerArgs, the KV event publisher's descriptor and the version).
const SGLangServerInfoPath = "/server_info"

// maxServerInfoBytes bounds the body read of SGLang's /server_info (about 19 KiB for 0.5.23).
const maxServerInfoBytes = 1 << 20

// SGLangServerInfo is what the router reads of SGLang's GET /server_info: the flags its
// credit depends on. Pointers are nil when the key is missing or null.
type SGLangServerInfo struct {
	Version           string  `json:"version"`
	PageSize          *int    `json:"page_size"`           // --page-size; null: the attention backend's default
	EnableCacheReport *bool   `json:"enable_cache_report"` // --enable-cache-report
	KVEventsConfig    *string `json:"kv_events_config"`    // --kv-events-config (a JSON string)
	DPSize            *int    `json:"dp_size"`             // --dp-size
	// SpeculativeAlgorithm is --speculative-algorithm (null: none).
	SpeculativeAlgorithm *string `json:"speculative_algorithm"`
	// KVEvents is SGLang's own descriptor of its publisher (runtime_context.py
	// describe_kv_events_publisher), null when KV events are off.
	KVEvents *struct {
		EndpointPortBase       int  `json:"endpoint_port_base"`
		ReplayEndpointPortBase *int `json:"replay_endpoint_port_base"`
		BlockSize              int  `json:"block_size"`
		DPSize                 int  `json:"dp_size"`
	} `json:"kv_events"`
}

// ParseSGLangServerInfo decodes a /server_info body; it fails on a body that is not a JSON
// object, over 1 MiB, or without page_size (not SGLang's).
func ParseSGLangServerInfo(body []byte) (SGLangServerInfo, error) {
	var info SGLangServerInfo
	if len(body) > maxServerInfoBytes {
		return info, fmt.Errorf("pool: sglang %s: body of %d bytes is over %d", SGLangServerInfoPath, len(body), maxServerInfoBytes)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(body, &keys); err != nil {
		return info, fmt.Errorf("pool: sglang %s: %w", SGLangServerInfoPath, err)
	}
	if _, ok := keys["page_size"]; !ok {
		return info, fmt.Errorf("pool: sglang %s: no page_size key: not an SGLang server", SGLangServerInfoPath)
	}
	if err := json.Unmarshal(body, &info); err != nil {
		return info, fmt.Errorf("pool: sglang %s: %w", SGLangServerInfoPath, err)
	}
	return info, nil
}

// SpeculativeEagle is the model setting `speculative: eagle`: its SGLang workers run EAGLE
// speculative decoding, which keys their radix cache by token bigrams.
const SpeculativeEagle = "eagle"

// bigramAlgorithms are the --speculative-algorithm values for which SGLang 0.5.23 keys its
// radix cache by bigrams: SpeculativeAlgorithm.is_eagle() (EAGLE, EAGLE3, FROZEN_KV_MTP; NEXTN
// is an alias of EAGLE), which the cache builder passes on as CacheInitParams.is_eagle.
var bigramAlgorithms = []string{"EAGLE", "EAGLE3", "NEXTN", "FROZEN_KV_MTP"}

// BigramKeys reports whether the server's --speculative-algorithm makes SGLang key its radix
// cache by token bigrams, and the algorithm ("" when none is set).
func (info SGLangServerInfo) BigramKeys() (bool, string) {
	if info.SpeculativeAlgorithm == nil || *info.SpeculativeAlgorithm == "" {
		return false, ""
	}
	algo := *info.SpeculativeAlgorithm
	return slices.Contains(bigramAlgorithms, strings.ToUpper(algo)), algo
}

// CheckSGLang returns every flag of an SGLang server (info, read from w's rank 0) that does not
// fit the router's configuration, each error naming the SGLang flag and the value to start it
// with; nil when all fit. blockSize is the model's block_size and speculative its speculative
// setting ("" or SpeculativeEagle). The KV event checks apply when
// w has a kv_events endpoint (the router subscribes to it); under a bound subscriber
// (router.kv_events_bind) SGLang dials out and its endpoint is not the router's business.
func CheckSGLang(info SGLangServerInfo, w WorkerInfo, blockSize int, speculative string) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	page := -1
	switch {
	case info.KVEvents != nil && info.KVEvents.BlockSize > 0:
		page = info.KVEvents.BlockSize // what the publisher really uses
	case info.PageSize != nil:
		page = *info.PageSize
	}
	switch {
	case page < 0:
		bad("--page-size is not set (SGLang then takes its attention backend's default, 1 for most); "+
			"start SGLang with --page-size %d, condisagg's block_size (one KV event block per page)", blockSize)
	case page != blockSize:
		bad("--page-size is %d; start SGLang with --page-size %d, condisagg's block_size "+
			"(one KV event block per page: stores of another size are refused, no credit)", page, blockSize)
	}
	if info.EnableCacheReport == nil || !*info.EnableCacheReport {
		bad("--enable-cache-report is off; start SGLang with --enable-cache-report " +
			"(answers then carry usage.prompt_tokens_details.cached_tokens, which condisagg's feedback reads)")
	}
	if n := info.dpSize(); n != max(w.DataParallelSize, 1) {
		bad("--dp-size is %d; the worker's data_parallel_size is %d: make them equal "+
			"(each rank is its own worker, its own KV event stream and X-Data-Parallel-Rank)", n, max(w.DataParallelSize, 1))
	}
	switch bigram, algo := info.BigramKeys(); {
	case bigram && speculative != SpeculativeEagle:
		bad("--speculative-algorithm is %s: SGLang then keys its radix cache by token bigrams, which a model without "+
			"speculative: eagle does not (its KV event stores are refused, no credit); set speculative: eagle on the model "+
			"(model.speculative or models[i].speculative)", algo)
	case !bigram && speculative == SpeculativeEagle && algo == "":
		bad("--speculative-algorithm is not set, but the model has speculative: eagle (bigram keys): start SGLang with " +
			"--speculative-algorithm EAGLE (or EAGLE3, NEXTN), or remove speculative: eagle from the model")
	case !bigram && speculative == SpeculativeEagle:
		bad("--speculative-algorithm is %s, which keys SGLang's radix cache by plain tokens, but the model has "+
			"speculative: eagle (bigram keys): remove speculative: eagle from the model", algo)
	}
	if w.KVEvents != "" {
		checkSGLangEvents(info, w, bad)
	}
	return errors.Join(errs...)
}

func (info SGLangServerInfo) dpSize() int {
	if info.DPSize != nil && *info.DPSize > 0 {
		return *info.DPSize
	}
	return 1
}

// checkSGLangEvents checks SGLang's publisher against the worker's kv_events and kv_replay.
func checkSGLangEvents(info SGLangServerInfo, w WorkerInfo, bad func(string, ...any)) {
	ev := info.KVEvents
	if ev == nil {
		bad("--kv-events-config is not set, but the worker has kv_events %s; start SGLang with "+
			`--kv-events-config '{"publisher":"zmq","endpoint":"tcp://*:%s"%s}'`, w.KVEvents, urlPort(w.KVEvents), replayHint(w.KVReplay))
		return
	}
	if p := urlPort(w.KVEvents); p != "" && p != strconv.Itoa(ev.EndpointPortBase) {
		bad("--kv-events-config publishes on port %d, the worker's kv_events is %s: make the ports equal", ev.EndpointPortBase, w.KVEvents)
	}
	if w.KVReplay == "" {
		return
	}
	switch p := urlPort(w.KVReplay); {
	case ev.ReplayEndpointPortBase == nil:
		bad(`--kv-events-config has no replay_endpoint, the worker's kv_replay is %s: add "replay_endpoint":"tcp://*:%s"`, w.KVReplay, p)
	case p != strconv.Itoa(*ev.ReplayEndpointPortBase):
		bad("--kv-events-config replays on port %d, the worker's kv_replay is %s: make the ports equal", *ev.ReplayEndpointPortBase, w.KVReplay)
	}
}

func replayHint(replay string) string {
	if replay == "" {
		return ""
	}
	return `,"replay_endpoint":"tcp://*:` + urlPort(replay) + `"`
}

func urlPort(u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return pu.Port()
}
