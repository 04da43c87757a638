package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/pool"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// TestResetPrefixCacheEngines: the reset goes to each engine's own endpoint (vLLM's POST
// /reset_prefix_cache, SGLang's POST /flush_cache, which answers plain text, and 400 while
// requests run); a refused reset keeps the index, an accepted one clears it; an engine with no
// reset the router can call is refused before anything is fenced.
func TestResetPrefixCacheEngines(t *testing.T) {
	var mu sync.Mutex // guards asked, busy
	var asked []string
	busy := false
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, r.Method+" "+r.URL.Path)
		switch {
		case r.Method != http.MethodPost:
			http.Error(w, "method", http.StatusMethodNotAllowed)
		case r.URL.Path == "/flush_cache" && busy: // SGLang's refusal while requests run
			http.Error(w, "Flush cache failed.", http.StatusBadRequest)
		case r.URL.Path == "/flush_cache":
			w.Write([]byte("Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n"))
		case r.URL.Path == "/reset_prefix_cache":
			w.Write([]byte(`{"success": true}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer engine.Close()
	addr := strings.TrimPrefix(engine.URL, "http://")
	e := newEnv(t,
		pool.WorkerConfig{Name: "sglang-0", Role: pool.RoleDecode, Endpoint: addr, Engine: pool.EngineSGLang, NumGPUBlocks: 40000},
		pool.WorkerConfig{Name: "trt-0", Role: pool.RoleDecode, Endpoint: "10.0.0.31:8000", Engine: pool.EngineTRTLLMDynamo, NumGPUBlocks: 40000},
		pool.WorkerConfig{Name: "vllm-0", Role: pool.RoleDecode, Endpoint: addr, NumGPUBlocks: 40000})
	client := startAdmin(t, e, ServerOptions{})
	ctx := context.Background()
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("flush me ", 40) + `"}]}`)
	blocks := func(w string) int {
		st, _ := e.index.Stats(kvindex.WorkerID(w))
		return st.Blocks[kvindex.GPU]
	}

	e.cacheOn("sglang-0", body)
	mu.Lock()
	busy = true
	mu.Unlock()
	res, err := client.ResetPrefixCache(ctx, &condisaggv1.ResetPrefixCacheRequest{Worker: "sglang-0"})
	if err != nil || res.Success || !strings.HasSuffix(res.Url, "/flush_cache") || blocks("sglang-0") == 0 {
		t.Fatalf("busy SGLang: %+v, %v; %d blocks left (want refused, index kept)", res, err, blocks("sglang-0"))
	}
	mu.Lock()
	busy = false
	mu.Unlock()
	res, err = client.ResetPrefixCache(ctx, &condisaggv1.ResetPrefixCacheRequest{Worker: "sglang-0"})
	if err != nil || !res.Success || blocks("sglang-0") != 0 {
		t.Fatalf("idle SGLang: %+v, %v; %d blocks left (want reset and cleared)", res, err, blocks("sglang-0"))
	}
	if res, err = client.ResetPrefixCache(ctx, &condisaggv1.ResetPrefixCacheRequest{Worker: "vllm-0"}); err != nil || !res.Success {
		t.Fatalf("vLLM: %+v, %v", res, err)
	}
	e.cacheOn("trt-0", body)
	_, err = client.ResetPrefixCache(ctx, &condisaggv1.ResetPrefixCacheRequest{Worker: "trt-0"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "trtllm-dynamo has no prefix-cache reset") || blocks("trt-0") == 0 {
		t.Fatalf("TRT-LLM: %v; %d blocks left (want refused, index kept)", err, blocks("trt-0"))
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "POST /flush_cache,POST /flush_cache,POST /reset_prefix_cache"; strings.Join(asked, ",") != want {
		t.Fatalf("the engine was asked %v; want %s", asked, want)
	}
}
