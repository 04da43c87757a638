// Package condisaggv1 is the generated Go code of the condisagg Admin gRPC API
// (admin.proto: Explain, ListWorkers, ReloadConfig); regenerate it with proto/generate.sh.
package condisaggv1
