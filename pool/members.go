package pool

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Member is one server a discovery source (pool/kube: Kubernetes EndpointSlices) wants in the
// pool. It is registered exactly as one resolved address of a DNS-named config entry: one
// worker per data-parallel rank, ids RankID(ID, r), event endpoints offset by the rank.
type Member struct {
	// ID is the server's worker id (its rank 0): by convention "<entry name>@<ip>:<port>", the
	// form a DNS-named entry gives each address. It must not contain '/' or spaces.
	ID string
	// Worker describes the server: Name is the discovery entry's name, Endpoint a literal
	// ip:port, KVEvents and KVReplay tcp:// URLs or "" (validated as a config entry is).
	Worker WorkerConfig
}

// maxMembers bounds the workers of one discovery source (every rank counts): metric label
// sets and probes grow with them.
const maxMembers = 4096

// SetMembers makes the workers of discovery source source equal ms, through the same path as
// Resolve: newcomers join (OnChange, probed at once), vanished ones leave with their bookings,
// and a member whose description changed under the same id leaves and joins again. Members
// that are invalid, whose id or endpoint another worker (of the config or another source)
// already has, or beyond maxMembers workers are left out, and the problems are returned
// joined; the others are applied and returned. SetMembers(source, nil) removes every worker
// of source.
func (p *Pool) SetMembers(source string, ms []Member) ([]Member, error) {
	p.discMu.Lock()
	defer p.discMu.Unlock()
	taken := map[string]string{} // worker id or endpoint -> who has it
	claim := func(key, by string) (string, bool) {
		if prev, ok := taken[key]; ok {
			return prev, false
		}
		taken[key] = by
		return "", true
	}
	for _, s := range p.resolved {
		claim("id "+s.id, "config worker "+s.wc.Name)
		claim("endpoint "+s.ep, "config worker "+s.wc.Name)
	}
	for src, specs := range p.members {
		if src == source {
			continue
		}
		for _, s := range specs {
			claim("id "+s.id, "discovery source "+src)
			claim("endpoint "+s.ep, "discovery source "+src)
		}
	}
	var want []spec
	var errs []error
	var accepted []Member
	for _, m := range ms {
		if err := m.validate(); err != nil {
			errs = append(errs, fmt.Errorf("pool: set members source=%s worker=%s: %w", source, m.ID, err))
			continue
		}
		host, port, _ := splitHostPort(m.Worker.Endpoint)
		specs := newSpecs(m.Worker, m.ID, host, port, "")
		if len(want)+len(specs) > maxMembers {
			errs = append(errs, fmt.Errorf("pool: set members source=%s worker=%s: over the limit of %d workers per source",
				source, m.ID, maxMembers))
			continue
		}
		if prev, ok := claim("id "+m.ID, source); !ok {
			errs = append(errs, fmt.Errorf("pool: set members source=%s worker=%s: id is already taken by %s", source, m.ID, prev))
			continue
		}
		if prev, ok := claim("endpoint "+specs[0].ep, source); !ok {
			errs = append(errs, fmt.Errorf("pool: set members source=%s worker=%s: endpoint %s is already a worker of %s",
				source, m.ID, specs[0].ep, prev))
			continue
		}
		want = append(want, specs...)
		accepted = append(accepted, m)
	}
	if len(want) == 0 {
		delete(p.members, source)
	} else {
		p.members[source] = want
	}
	p.applyLocked()
	return accepted, errors.Join(errs...)
}

// validate checks a member as a config entry, plus a literal IP endpoint and an id that
// cannot be mistaken for a data-parallel rank's.
func (m Member) validate() error {
	if m.ID == "" || strings.ContainsAny(m.ID, "/ \t\n") {
		return fmt.Errorf("id %s must be non-empty without '/' or spaces", strconv.Quote(m.ID))
	}
	var errs []error
	for _, err := range m.Worker.validate(0, map[string]bool{}) {
		errs = append(errs, errors.New(strings.TrimPrefix(err.Error(), "pool config: workers[0].")))
	}
	if host, _, ok := splitHostPort(m.Worker.Endpoint); ok {
		if _, err := netip.ParseAddr(host); err != nil {
			errs = append(errs, fmt.Errorf("endpoint: %s must be a literal ip:port", strconv.Quote(m.Worker.Endpoint)))
		}
	}
	return errors.Join(errs...)
}

// Members lists the ids of the servers (rank 0) discovery source source registered.
func (p *Pool) Members(source string) []string {
	p.discMu.Lock()
	defer p.discMu.Unlock()
	var ids []string
	for _, s := range p.members[source] {
		if s.rank == 0 {
			ids = append(ids, s.id)
		}
	}
	return ids
}
