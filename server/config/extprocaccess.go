package config

import (
	"crypto/tls"
	"crypto/x509"
	"os"
)

// The ext_proc port decides where requests go and books load on workers, so whoever reaches
// it can steer the fleet. It binds loopback by default; anywhere else it needs mutual TLS
// (tls_client_ca: only the gateway's certificate gets in) or the operator's statement that
// the network admits only the gateway (allow_unauthenticated_listen, which the Helm chart
// sets together with its NetworkPolicy).

// extProcTLS builds the ext_proc port's TLS config from tls_cert, tls_key and tls_client_ca
// (nil: plaintext). Problems go to bad.
func extProcTLS(fc File, bad func(string, any, string)) *tls.Config {
	if fc.TLSCert == "" || fc.TLSKey == "" {
		if fc.TLSClientCA != "" {
			bad("tls_client_ca", fc.TLSClientCA, "needs tls_cert and tls_key (mTLS runs over TLS)")
		}
		return nil
	}
	cert, err := tls.LoadX509KeyPair(fc.TLSCert, fc.TLSKey)
	if err != nil {
		bad("tls_cert", fc.TLSCert, "must load with tls_key: "+err.Error())
		return nil
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if fc.TLSClientCA != "" {
		pem, err := os.ReadFile(fc.TLSClientCA)
		pool := x509.NewCertPool()
		if err != nil || !pool.AppendCertsFromPEM(pem) {
			bad("tls_client_ca", fc.TLSClientCA, "must be a readable PEM CA bundle")
			return c
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c
}

// checkListenAccess refuses an ext_proc listener off loopback that nothing protects.
func checkListenAccess(fc File, c *tls.Config, bad func(string, any, string)) {
	if fc.Listen == "" || loopback(fc.Listen) || fc.AllowUnauthenticatedListen {
		return
	}
	if c != nil && c.ClientAuth == tls.RequireAndVerifyClientCert {
		return
	}
	bad("listen", fc.Listen, "is not a loopback address and the ext_proc port has no client authentication: set tls_client_ca "+
		"with tls_cert/tls_key (mTLS: only the gateway's certificate gets in), or allow_unauthenticated_listen: true when a "+
		"NetworkPolicy or firewall admits only the gateway (the Helm chart's networkPolicy), or bind it to 127.0.0.1")
}

// Bounds of the listener settings.
const (
	MaxMaxConnections = 1 << 16
	MaxStreamsPerConn = 1 << 16
	MaxPretokenBytes  = 1 << 30
)
