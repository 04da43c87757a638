package kvevents

import (
	"bytes"

	"github.com/prometheus/client_golang/prometheus"
)

// mediumLabels are the non-device media counted under their own label (upper case, as vLLM and
// Dynamo spell them, §3.4); any other medium is counted as "other".
var mediumLabels = [...]string{
	"CPU", "CPU_PINNED", "CPU_TIER1", "CPU_TIER2", "STORAGE", "FS", "OBJ", "DISK", "NVME",
	"EXTERNAL", "NETWORK", "REMOTE", "SHARED",
}

// maxTagLabels bounds the distinct unknown-tag labels per stream; later tags count as "other".
// maxTagBytes bounds one tag label.
const (
	maxTagLabels = 8
	maxTagBytes  = 64
)

// labelSafe reports whether tag can be a label value as is: printable ASCII, 1..maxTagBytes.
func labelSafe(tag []byte) bool {
	if len(tag) == 0 || len(tag) > maxTagBytes {
		return false
	}
	for _, ch := range tag {
		if ch < 0x20 || ch > 0x7e {
			return false
		}
	}
	return true
}

// applyCounters are an Applier's metric children, resolved once so applying allocates nothing.
type applyCounters struct {
	m      *Metrics
	worker string

	batches, stored, removed, cleared            prometheus.Counter
	decodeErrors, rankMismatches, capacityClears prometheus.Counter
	skipped                                      [numSkipReasons]prometheus.Counter
	media                                        [len(mediumLabels) + 1]prometheus.Counter // resolved on first use; last = "other"
	tags                                         []tagCounter
	otherTag                                     prometheus.Counter
	blockSize                                    prometheus.Gauge // BlockSizeMismatch
}

type tagCounter struct {
	tag string
	c   prometheus.Counter
}

func newApplyCounters(m *Metrics, worker string) applyCounters {
	c := applyCounters{
		m:              m,
		worker:         worker,
		batches:        m.Batches.WithLabelValues(worker),
		blockSize:      m.BlockSizeMismatch.WithLabelValues(worker),
		stored:         m.Events.WithLabelValues(worker, KindBlockStored.String()),
		removed:        m.Events.WithLabelValues(worker, KindBlockRemoved.String()),
		cleared:        m.Events.WithLabelValues(worker, KindAllBlocksCleared.String()),
		decodeErrors:   m.DroppedFrames.WithLabelValues(worker, "decode_error"),
		rankMismatches: m.DroppedFrames.WithLabelValues(worker, "rank_mismatch"),
		capacityClears: m.Clears.WithLabelValues(worker, "capacity"),
	}
	for r := range numSkipReasons {
		c.skipped[r] = m.SkippedEvents.WithLabelValues(worker, r.String())
	}
	return c
}

func (c *applyCounters) skip(r skipReason, n int) { c.skipped[r].Add(float64(n)) }

// nonGPU returns the counter of medium (nil or unlisted => "other").
func (c *applyCounters) nonGPU(medium []byte) prometheus.Counter {
	i := len(mediumLabels)
	for j, l := range mediumLabels {
		if bytes.EqualFold(medium, []byte(l)) {
			i = j
			break
		}
	}
	if c.media[i] == nil {
		label := "other"
		if i < len(mediumLabels) {
			label = mediumLabels[i]
		}
		c.media[i] = c.m.NonGPUMedium.WithLabelValues(c.worker, label)
	}
	return c.media[i]
}

// unknownTag returns the counter of an unknown tag: its own label for the first maxTagLabels
// distinct tags of the stream (printable ASCII, at most maxTagBytes), "other" after that.
func (c *applyCounters) unknownTag(tag []byte) prometheus.Counter {
	for _, t := range c.tags {
		if t.tag == string(tag) {
			return t.c
		}
	}
	if len(c.tags) < maxTagLabels && labelSafe(tag) {
		s := string(tag)
		t := tagCounter{tag: s, c: c.m.UnknownEvents.WithLabelValues(c.worker, s)}
		c.tags = append(c.tags, t)
		return t.c
	}
	if c.otherTag == nil {
		c.otherTag = c.m.UnknownEvents.WithLabelValues(c.worker, "other")
	}
	return c.otherTag
}
