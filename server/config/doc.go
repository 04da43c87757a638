// Package serveconfig is the configuration of `condisagg serve`: the YAML file
// (ARCHITECTURE §4), the flags that override it (Dynamo's names), and their validation into
// the configs of the components (extproc.Settings with its policy.Config, pool.Config, the
// listeners and how the admin listeners are protected). Every problem is reported at once as
// "config: <field>: <value> <rule>".
//
// It reads files (the config, the admin token, TLS material) and nothing else: no sockets, no
// goroutines. cmd/condisagg wires the result; reloads call Flags.Load again.
package config
