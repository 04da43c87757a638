package config

import (
	"fmt"
	"strconv"

	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/pool/kube"
)

// discoveryField is where the Kubernetes discovery block sits in the file.
const discoveryField = "discovery.kubernetes"

// discoveryOf validates discovery.kubernetes (nil when absent) and returns each model's
// entries, in the order of ms. An entry's model must be "" or the model's name in the
// single-model form, and a models[] name in the several-model form; entry names must not be
// worker names of the same model (their workers would share ids).
func discoveryOf(fc File, ms []ModelFile, named bool, errs *[]error) ([][]kube.Entry, *kube.Config) {
	bad := func(field string, value any, rule string) {
		*errs = append(*errs, fmt.Errorf("config: %s: %v %s", field, value, rule))
	}
	out := make([][]kube.Entry, len(ms))
	kc := fc.Discovery.Kubernetes
	if kc == nil {
		return out, nil
	}
	c := kc.WithDefaults()
	if err := c.Validate(discoveryField); err != nil {
		*errs = append(*errs, err)
	}
	for i, e := range c.Workers {
		f := discoveryField + ".workers[" + strconv.Itoa(i) + "]"
		mi := modelIndex(ms, e.Model, named)
		if mi < 0 {
			rule := "must name a models[] entry (its name)"
			if !named {
				rule = `must be "" or model.name in the single-model form`
			}
			bad(f+".model", strconv.Quote(e.Model), rule)
			continue
		}
		for _, w := range ms[mi].Workers {
			if w.Name == e.Name {
				bad(f+".name", strconv.Quote(e.Name), "is already a worker of the same model; use another name")
			}
		}
		out[mi] = append(out[mi], e)
	}
	return out, &c
}

// modelIndex is the index of the model an entry names, -1 if none.
func modelIndex(ms []ModelFile, name string, named bool) int {
	if !named {
		if name == "" || name == ms[0].Name {
			return 0
		}
		return -1
	}
	for i, m := range ms {
		if m.Name == name {
			return i
		}
	}
	return -1
}

// discoveredRoles stands for the roles discovery will find in the pool test of distinctPools:
// one placeholder worker per role an entry discovers (endpoints no real worker has).
func discoveredRoles(entries []kube.Entry) []pool.WorkerConfig {
	var ws []pool.WorkerConfig
	for _, e := range entries {
		ws = append(ws, pool.WorkerConfig{Name: e.Name, Role: e.Role, Endpoint: fmt.Sprintf("discovery.kubernetes/%s:1", e.Name)})
	}
	return ws
}
