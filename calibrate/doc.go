// Package calibrate fits the step-time coefficients of the cost model (perf-model.md §1–§2:
// t0, a1, a2, d1, d2) to measurements of a live engine: Plan designs the sweep of isolated
// prefills, mixed steps (a prompt beside running decodes) and decode batches within the
// engine's bounds; PrefillSample, MixedSample and DecodeSample turn the streamed token times of
// one probe into a sample; and Fit solves the weighted least squares (the step terms from the
// in-engine samples, the request's handling from the isolated prefills), reports R² and the
// worst relative error per kind of probe, and refuses a fit that does not settle or does not
// fit.
//
// Pure: no I/O, no clock, no goroutines; times arrive as durations. The HTTP driver that sends
// the probes to an engine is calibrate/engine. Imports of the project: cost only.
package calibrate
