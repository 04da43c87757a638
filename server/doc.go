// Package server is `condisagg serve` assembled: it loads the configuration (server/config),
// builds one tokenizer, prefix index, pool and KV event group per model, the router and the
// ext_proc server, and runs the ext_proc, Admin gRPC and admin HTTP listeners (with the status
// page of server/statuspage) until its context ends. It keeps readiness from the pools and
// reloads the configuration on SIGHUP, on a change of the file and on Admin ReloadConfig.
//
// Run owns every goroutine it starts and waits for them before it returns. Only cmd/*
// imports it; no library package does (internal/layers).
package server
