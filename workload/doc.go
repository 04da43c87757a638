// Package workload turns request traces and synthetic workload specifications into replayable
// requests whose prompt tokens are produced on demand, and summarises the latencies measured
// when they are served.
//
// # Requests and tokens
//
// A Request carries its arrival offset, session and turn when known, and its prompt and forced
// output as Segments: runs of a pseudo-token stream. Token k of stream h is a pure function of
// (h, k) and the Vocab (perf-model.md §7): x = Seed XOR h·φ, token = Lo + splitmix64(x+k) mod
// (Hi−Lo). Nothing is materialised until a caller asks (Vocab.AppendPrompt,
// AppendCompletionBody), so a whole trace costs a few segments per request in memory.
//
// Sources:
//   - MooncakeReader / ReadMooncake: Mooncake JSONL; each 512-token hash id is one stream
//     (the last partial), so requests sharing k leading ids share exactly 512·k leading tokens
//     and 512·k/B leading router blocks at any block size B dividing 512.
//   - ReadAzure: Azure 2023 CSV, arrivals and lengths only; optional synthetic shared
//     prefixes (AzureOptions), else no shared tokens.
//   - SharedPrefixConfig (SGLang generated-shared-prefix, vLLM prefix_repetition, llm-d B2B
//     presets) and AgenticConfig (aiperf agentic-code sessions): deterministic for a seed. A
//     multi-turn session is one growing stream: each turn's prompt is a prefix of it and its
//     output the next tokens, so the next turn reuses both.
//
// Window slices a workload (first N requests or seconds), ScaleRate multiplies its arrival rate.
//
// # Measurements
//
// Result is one served request; Summarize turns results into a Summary (TTFT, TPOT, token-gap
// and E2E distributions, attainment and goodput under an SLO, prefix-hit rate, route counts)
// with the exact definitions of perf-model.md §6, SummarizeByISL does the same per ISL bucket,
// and WriteSummaries prints them as the table shared by cmd/loadgen and the simulator's tune
// report (SummaryHeader and Summary.Cells let tune append its own columns).
//
// # Concurrency and imports
//
// Readers are for one goroutine; Requests, Vocab and configs are immutable values safe to
// share. The package does no network I/O, starts no goroutines and imports only
// internal/splitmix of the project (its draws).
package workload
