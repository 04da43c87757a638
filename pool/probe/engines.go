package probe

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/condisagg/condisagg/pool"
)

// engineCheckInterval is how often checkEngines looks for SGLang servers it has not read yet.
const engineCheckInterval = 2 * time.Second

// checkEngines reads GET /server_info of every SGLang server (rank 0 of each worker entry)
// once it answers, and logs at error level every flag that does not fit the router's
// configuration (pool.CheckSGLang names each flag and its value), or at info level that all
// fit. A server is read again when its endpoint changes; one that does not answer yet is
// tried again every 2 s. vLLM and TRT-LLM expose no such endpoint (vLLM's block size is
// checked from its /metrics, scrape.go).
func (s *Shell) checkEngines(ctx context.Context) {
	done := map[string]bool{} // id + endpoint of each server read
	every(ctx, engineCheckInterval, func() { s.checkEnginesOnce(ctx, done) })
}

// checkEnginesOnce reads the servers not in done (id + endpoint) and adds those that answered.
func (s *Shell) checkEnginesOnce(ctx context.Context, done map[string]bool) {
	for _, w := range s.pool.Workers() {
		key := w.ID + " " + w.Endpoint
		if w.EngineKind != pool.EngineSGLang || w.Rank != 0 || done[key] {
			continue
		}
		info, err := s.serverInfo(ctx, w)
		if err != nil {
			s.log.Debug("sglang server info not read yet", "worker", w.ID, "err", err)
			continue
		}
		done[key] = true
		if err := pool.CheckSGLang(info, w, s.cfg.BlockSize, s.cfg.Speculative); err != nil {
			s.log.Error("sglang worker's flags do not fit condisagg's configuration", "worker", w.ID, "endpoint", w.Endpoint, "err", err)
			continue
		}
		s.log.Info("sglang worker's flags fit condisagg's configuration", "worker", w.ID, "endpoint", w.Endpoint)
	}
}

func (s *Shell) serverInfo(ctx context.Context, w pool.WorkerInfo) (pool.SGLangServerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ScrapeTimeout)
	defer cancel()
	url := "http://" + w.Endpoint + pool.SGLangServerInfoPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return pool.SGLangServerInfo{}, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return pool.SGLangServerInfo{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return pool.SGLangServerInfo{}, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20+1))
	if err != nil {
		return pool.SGLangServerInfo{}, fmt.Errorf("GET %s: %w", url, err)
	}
	return pool.ParseSGLangServerInfo(body)
}
