// Package config is the configuration of `condisagg serve`: the YAML file (ARCHITECTURE §4),
// the flags that override it (Dynamo's names), and their validation into the configs of the
// components (extproc.Settings with its policy.Config, one pool.Config per model, the
// listeners and how the admin listeners are protected). One table of settings (settings.go)
// states each scalar setting's YAML key, flag, default, help, rule and reload behaviour; the
// defaults, the flags, the checks and RestartNeeded read it. The single-model form of the file
// is normalised to a one-entry model list when parsed. Every problem is reported at once as
// "config: <field>: <value> <rule>".
//
// It reads files (the config, the admin token, TLS material) and nothing else: no sockets, no
// goroutines. The server package wires the result; reloads call Flags.Load again. A loaded
// Config is never modified.
package config
