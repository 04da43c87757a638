package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/condisagg/condisagg/pool"
)

// Bounds of probing.
const (
	probeConcurrent = 32      // probes in flight at once, over all workers
	maxProbeBody    = 4 << 10 // bytes of a health answer read, so that its connection is reused
)

// probeLoop probes every worker's HealthPath until ctx is done and returns once its probes have
// finished. Each worker has at most one probe in flight (the pool's schedule) and all workers
// at most probeConcurrent; a probe starts when its worker's slot is due, or sooner on request.
func (s *Shell) probeLoop(ctx context.Context) {
	s.pool.BeginProbing()
	defer s.pool.EndProbing()
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, probeConcurrent)
	freed := make(chan struct{}, 1) // a probe finished: a due worker may be waiting for its slot
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.pool.ProbeKick():
		case <-freed:
		}
		// Only this loop takes slots, so the free ones stay free until it takes them.
		due, wait := s.pool.DueProbes(cap(sem) - len(sem))
		for _, target := range due {
			sem <- struct{}{}
			wg.Go(func() {
				s.probeWorker(ctx, target)
				<-sem
				select {
				case freed <- struct{}{}:
				default:
				}
			})
		}
		t.Reset(wait)
	}
}

// probeWorker probes target once and reports the outcome to the pool.
func (s *Shell) probeWorker(ctx context.Context, target pool.ProbeTarget) {
	r, err := s.probeOne(ctx, target)
	if ctx.Err() != nil {
		s.pool.ProbeCancelled(target) // Run is stopping: a cancelled probe says nothing about the worker
		return
	}
	s.pool.ProbeDone(target, r, err)
}

// probeOne sends GET HealthPath to the target, bounded by HealthTimeout. Any 2xx is healthy.
func (s *Shell) probeOne(ctx context.Context, target pool.ProbeTarget) (pool.ProbeResult, error) {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.HealthTimeout)
	defer cancel()
	url := "http://" + target.Endpoint + s.cfg.HealthPath
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, url, nil)
	if err != nil {
		return pool.ProbeFailed, fmt.Errorf("pool: probe worker=%s url=%s: %w", target.ID, url, err)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		r := pool.ProbeFailed
		switch {
		case pctx.Err() != nil && ctx.Err() == nil:
			r = pool.ProbeTimeout
		case errors.Is(err, syscall.ECONNREFUSED):
			r = pool.ProbeRefused
		}
		return r, fmt.Errorf("pool: probe worker=%s url=%s: %w", target.ID, url, err)
	}
	_, _ = io.CopyN(io.Discard, resp.Body, maxProbeBody)
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return pool.ProbeFailed, fmt.Errorf("pool: probe worker=%s url=%s: status %d", target.ID, url, resp.StatusCode)
	}
	return pool.ProbeOK, nil
}
