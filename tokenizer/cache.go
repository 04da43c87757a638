package tokenizer

type segmentCache struct{}

func newSegmentCache(n, b int) *segmentCache { return nil }

func (c *segmentCache) encode(dst []uint32, text string, t *Tokenizer, sc *encodeScratch) []uint32 {
	return t.encodeSegment(dst, text, sc)
}
