package probe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/condisagg/condisagg/pool"
)

// scrapeConcurrent bounds the scrapes in flight at once.
const scrapeConcurrent = 8

// ScrapeAll scrapes every discovered worker once (at most 8 at a time) and applies the results
// (pool.ApplyScrape): capacities, request counts, and health (UnhealthyAfter consecutive
// failures make a worker ineligible; one success lifts that exclusion). It returns the
// failures joined.
func (s *Shell) ScrapeAll(ctx context.Context) error {
	targets := s.pool.ScrapeTargets()
	errs := make([]error, len(targets))
	sem := make(chan struct{}, scrapeConcurrent)
	var wg sync.WaitGroup
	for i, target := range targets {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			m, outcome, err := s.scrapeOne(ctx, target)
			s.pool.ApplyScrape(target, outcome, m, err)
			errs[i] = err
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (s *Shell) scrapeOne(ctx context.Context, target pool.ScrapeTarget) (pool.Scrape, pool.ScrapeOutcome, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ScrapeTimeout)
	defer cancel()
	url := "http://" + target.Endpoint + s.cfg.MetricsPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return pool.Scrape{}, pool.ScrapeHTTPError, fmt.Errorf("pool: scrape worker=%s url=%s: %w", target.ID, url, err)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return pool.Scrape{}, pool.ScrapeHTTPError, fmt.Errorf("pool: scrape worker=%s url=%s: %w", target.ID, url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return pool.Scrape{}, pool.ScrapeHTTPError, fmt.Errorf("pool: scrape worker=%s url=%s: status %d", target.ID, url, resp.StatusCode)
	}
	m, err := pool.ParseEngineMetrics(resp.Body, target.Engine)
	if err != nil {
		return pool.Scrape{}, pool.ScrapeParseError, fmt.Errorf("pool: scrape worker=%s url=%s: %w", target.ID, url, err)
	}
	return m, pool.ScrapeOK, nil
}
