package envoy

import "testing"

// BenchmarkRender measures one bootstrap render (defaults, validation, template) per mode.
func BenchmarkRender(b *testing.B) {
	for _, m := range Modes() {
		b.Run("mode="+string(m), func(b *testing.B) {
			p := testParams(m, m != FullDuplex)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Render(p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "renders/s")
		})
	}
}
