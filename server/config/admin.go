package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
)

// AdminAccess is how both admin listeners (HTTP and the Admin gRPC service) are protected:
// Explain reveals what every worker caches and ReloadConfig changes routing, so anywhere but
// loopback they need a bearer token, mutual TLS, or both.
type AdminAccess struct {
	Token string      // "" : none required
	TLS   *tls.Config // nil : plaintext; ClientAuth set when a client CA is configured
}

// minTokenBytes keeps guessable tokens out.
const minTokenBytes = 16

// loadAdminAccess reads the token file and the TLS material and checks that an admin listener
// off loopback is protected.
func loadAdminAccess(fc File) (AdminAccess, error) {
	var a AdminAccess
	var errs []error
	bad := func(field string, value any, rule string) {
		errs = append(errs, fmt.Errorf("config: %s: %v %s", field, value, rule))
	}
	if fc.AdminTokenFile != "" {
		b, err := os.ReadFile(fc.AdminTokenFile)
		tok := strings.TrimSpace(string(b))
		switch {
		case err != nil:
			bad("admin_token_file", fc.AdminTokenFile, "must be a readable file: "+err.Error())
		case len(tok) < minTokenBytes || strings.ContainsAny(tok, " \t\r\n"):
			bad("admin_token_file", fc.AdminTokenFile, fmt.Sprintf("must hold one token of at least %d characters without spaces", minTokenBytes))
		default:
			a.Token = tok
		}
	}
	if (fc.AdminTLSCert == "") != (fc.AdminTLSKey == "") {
		bad("admin_tls_cert/admin_tls_key", fc.AdminTLSCert+"/"+fc.AdminTLSKey, "must be given together")
	} else if fc.AdminTLSCert != "" {
		cert, err := tls.LoadX509KeyPair(fc.AdminTLSCert, fc.AdminTLSKey)
		if err != nil {
			bad("admin_tls_cert", fc.AdminTLSCert, "must load with admin_tls_key: "+err.Error())
		} else {
			a.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		}
	}
	if fc.AdminClientCA != "" {
		pem, err := os.ReadFile(fc.AdminClientCA)
		pool := x509.NewCertPool()
		switch {
		case fc.AdminTLSCert == "":
			bad("admin_client_ca", fc.AdminClientCA, "needs admin_tls_cert and admin_tls_key (mTLS runs over TLS)")
		case err != nil || !pool.AppendCertsFromPEM(pem):
			bad("admin_client_ca", fc.AdminClientCA, "must be a readable PEM CA bundle")
		case a.TLS != nil:
			a.TLS.ClientCAs, a.TLS.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
	}
	authenticated := a.Token != "" || (a.TLS != nil && a.TLS.ClientAuth == tls.RequireAndVerifyClientCert)
	for _, l := range []struct{ field, addr string }{{"admin_listen", fc.AdminListen}, {"admin_grpc_listen", fc.AdminGRPCListen}} {
		if l.addr == "" {
			bad(l.field, `""`, "must be host:port")
			continue
		}
		if !authenticated && !loopback(l.addr) {
			bad(l.field, l.addr, "is not a loopback address: set admin_token_file (--admin-token-file) or "+
				"admin_client_ca with admin_tls_cert/admin_tls_key (mTLS), or bind it to 127.0.0.1")
		}
	}
	return a, errors.Join(errs...)
}

// loopback reports whether a listen address only accepts local connections: an IP literal in
// 127.0.0.0/8 or ::1, or "localhost". An empty host (all interfaces) is not.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
