// Package statuspage is the admin HTTP port's read-only status page: the embedded static shell
// under /ui/ and the JSON it polls under /ui/api/ (the fleet, the latest decisions, the
// placement mix, the classified KV transfers and the configuration in force, secrets redacted).
// It reads a running router through Sources and changes nothing.
package statuspage
