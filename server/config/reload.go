package config

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"time"

	"github.com/condisagg/condisagg/pool"
)

// Stamp identifies one version of the configuration file, to notice that it changed.
type Stamp struct {
	mod  time.Time
	size int64
}

// FileStamp is the file's Stamp; the zero Stamp when there is no file or it cannot be read.
func FileStamp(path string) Stamp {
	if path == "" {
		return Stamp{}
	}
	st, err := os.Stat(path)
	if err != nil {
		return Stamp{}
	}
	return Stamp{st.ModTime(), st.Size()}
}

// RestartNeeded names the changed fields a reload cannot apply ("" when there are none): the
// models and their pools, the settings of the table marked restart, and discovery.
func RestartNeeded(old, cur *Config) string {
	var fields []string
	if !reflect.DeepEqual(poolsOf(old), poolsOf(cur)) {
		fields = append(fields, restartPool)
	}
	if !reflect.DeepEqual(old.Models, cur.Models) {
		fields = append(fields, restartModel)
	}
	for _, g := range restartGroups(&old.File, &cur.File) {
		if !slices.Contains(fields, g) {
			fields = append(fields, g)
		}
	}
	if !reflect.DeepEqual(old.BoundEvents, cur.BoundEvents) && !slices.Contains(fields, "router.kv_events") {
		fields = append(fields, "router.kv_events")
	}
	if !reflect.DeepEqual(old.Kubernetes, cur.Kubernetes) {
		fields = append(fields, "discovery")
	}
	if len(fields) == 0 {
		return ""
	}
	return fmt.Sprintf("%v changed", fields)
}

func poolsOf(c *Config) []pool.Config {
	ps := make([]pool.Config, len(c.Models))
	for i, m := range c.Models {
		ps[i] = m.Pool
	}
	return ps
}
