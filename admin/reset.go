package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/pool"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
	"github.com/condisagg/condisagg/route"
)

// errUnknownWorker: ResetPrefixCache named no discovered worker.
var errUnknownWorker = errors.New("admin: unknown worker")

// maxResetAnswer bounds how much of the engine's answer to a reset is read.
const maxResetAnswer = 64 << 10

// fencedRank is one data-parallel rank of the engine being reset, in one model's index.
type fencedRank struct {
	ix    *kvindex.Index
	id    string
	fence kvindex.FenceID
}

// ResetPrefixCache resets a worker's engine prefix cache and clears its index (admin.proto).
// The order matters (kvindex fence.go): every rank is fenced before the engine is asked, so
// neither a batch published before the reset nor the engine's late AllBlocksCleared can land
// between the reset and the clear; a refused reset lifts the fences and keeps the entries.
func (a *Service) ResetPrefixCache(ctx context.Context, req *condisaggv1.ResetPrefixCacheRequest) (*condisaggv1.ResetPrefixCacheResponse, error) {
	engine, endpoint, kind, ranks, err := a.resolveEngine(req.GetWorker())
	if err != nil {
		return nil, statusOf(err)
	}
	path, err := resetPath(kind)
	if err != nil {
		return nil, statusOf(fmt.Errorf("%w: worker %q: %w", route.ErrInvalidBody, req.GetWorker(), err))
	}
	url := "http://" + endpoint + path
	fenced := make([]fencedRank, len(ranks))
	for i, r := range ranks {
		fenced[i] = r
		fenced[i].fence = r.ix.Fence(kvindex.WorkerID(r.id))
	}
	resp := &condisaggv1.ResetPrefixCacheResponse{Url: url}
	if err := a.postReset(ctx, url); err != nil {
		for _, r := range fenced {
			r.ix.Unfence(kvindex.WorkerID(r.id), r.fence)
		}
		resp.Message = fmt.Sprintf("engine %s did not reset its prefix cache, the index is unchanged: %v", engine, err)
		return resp, nil
	}
	resp.Success = true
	for _, r := range fenced {
		if r.ix.ClearFenced(kvindex.WorkerID(r.id), r.fence) {
			resp.Cleared = append(resp.Cleared, r.id)
		}
	}
	resp.Message = fmt.Sprintf("engine %s reset its prefix cache; cleared %d of %d ranks (a rank whose AllBlocksCleared came first was already cleared by it); "+
		"stores are refused until each rank's AllBlocksCleared arrives", engine, len(resp.Cleared), len(fenced))
	return resp, nil
}

// resolveEngine finds the engine server that name denotes (a worker's name, its engine id or
// the id of one of its ranks), its HTTP endpoint and every rank of it in every model's index.
func (a *Service) resolveEngine(name string) (engine, endpoint string, kind pool.EngineKind, ranks []fencedRank, err error) {
	if name == "" {
		return "", "", "", nil, fmt.Errorf("%w: worker: empty; name a worker (condisagg workers lists them)", route.ErrInvalidBody)
	}
	models := a.opts.Router.Models()
	var engines, known []string
	for _, m := range models {
		for _, w := range m.Pool.Workers() {
			known = append(known, w.ID)
			if w.ID == name || w.Engine == name || w.Name == name {
				if !slices.Contains(engines, w.Engine) {
					engines = append(engines, w.Engine)
				}
			}
		}
	}
	switch len(engines) {
	case 0:
		slices.Sort(known)
		return "", "", "", nil, fmt.Errorf("%w: worker %q; known workers: %s", errUnknownWorker, name, strings.Join(slices.Compact(known), ", "))
	case 1:
	default:
		return "", "", "", nil, fmt.Errorf("%w: worker %q names %d engine servers (%s); name one by its id", route.ErrInvalidBody, name, len(engines), strings.Join(engines, ", "))
	}
	engine = engines[0]
	for _, m := range models {
		for _, w := range m.Pool.Workers() {
			if w.Engine == engine {
				endpoint, kind = w.Endpoint, w.EngineKind
				ranks = append(ranks, fencedRank{ix: m.Index, id: w.ID})
			}
		}
	}
	return engine, endpoint, kind, ranks, nil
}

// resetPath is the engine's prefix-cache reset endpoint: vLLM's POST /reset_prefix_cache
// (served with VLLM_SERVER_DEV_MODE=1), SGLang's POST /flush_cache (refused with 400 while
// requests run, as vLLM refuses). TensorRT-LLM behind Dynamo exposes none the router can call.
func resetPath(kind pool.EngineKind) (string, error) {
	switch kind.Kind() {
	case pool.EngineVLLM:
		return "/reset_prefix_cache", nil
	case pool.EngineSGLang:
		return "/flush_cache", nil
	default:
		return "", fmt.Errorf("engine %s has no prefix-cache reset the router can call", kind)
	}
}

// postReset asks the engine to reset its prefix cache; nil means it said it did. vLLM answers
// {"success": false} (or an error status) while a request is running.
func (a *Service) postReset(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	res, err := a.opts.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, maxResetAnswer))
	switch {
	case res.StatusCode == http.StatusNotFound:
		return fmt.Errorf("POST %s: 404: the engine does not serve it (vLLM exposes it only with VLLM_SERVER_DEV_MODE=1)", url)
	case res.StatusCode/100 != 2:
		return fmt.Errorf("POST %s: %s: %s", url, res.Status, strings.TrimSpace(string(body)))
	}
	var ans struct {
		Success *bool `json:"success"`
	}
	if len(body) > 0 && json.Unmarshal(body, &ans) == nil && ans.Success != nil && !*ans.Success {
		return fmt.Errorf("POST %s: the engine answered %s (it refuses while requests are running)", url, strings.TrimSpace(string(body)))
	}
	return nil
}
