package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client certificate, all PEM,
// into dir and returns their paths.
type testPKI struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func newTestPKI(t *testing.T, dir string) testPKI {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		return writeFile(t, dir, name, string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})))
	}
	writeKey := func(name string, k *ecdsa.PrivateKey) string {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name, "EC PRIVATE KEY", der)
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	sDER, sKey := leaf(2, "condisagg admin", x509.ExtKeyUsageServerAuth)
	cDER, cKey := leaf(3, "operator", x509.ExtKeyUsageClientAuth)
	return testPKI{ca: write("ca.pem", "CERTIFICATE", caDER),
		serverCert: write("server.pem", "CERTIFICATE", sDER), serverKey: writeKey("server-key.pem", sKey),
		clientCert: write("client.pem", "CERTIFICATE", cDER), clientKey: writeKey("client-key.pem", cKey)}
}

// TestAdminClientsMutualTLS (issue 12 item 7, the client side): with admin_tls_cert/key and
// admin_client_ca, `condisagg workers` reaches the Admin service only over TLS with a client
// certificate the CA signed: plaintext and TLS without a certificate fail, --ca-file with
// --cert-file/--key-file succeeds, and a certificate without its key is a usage error.
func TestAdminClientsMutualTLS(t *testing.T) {
	model := requireModel(t)
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	a := startServe(t, strings.Replace(serveYAML, "MODEL", model, 1)+workersYAML+
		"admin_tls_cert: "+pki.serverCert+"\nadmin_tls_key: "+pki.serverKey+"\nadmin_client_ca: "+pki.ca+"\n")
	workers := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"workers", "--addr", a.adminGRPC, "--timeout", "5s"}, args...), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	if code, text := workers(); code != 1 {
		t.Fatalf("plaintext against the TLS admin listener: exit %d\n%s", code, text)
	}
	if code, text := workers("--ca-file", pki.ca); code != 1 {
		t.Fatalf("TLS without a client certificate: exit %d\n%s", code, text)
	}
	if code, text := workers("--ca-file", pki.ca, "--cert-file", pki.clientCert, "--key-file", pki.clientKey); code != 0 ||
		!strings.Contains(text, "decode-0") {
		t.Fatalf("mTLS client: exit %d\n%s", code, text)
	}
	if code, text := workers("--ca-file", pki.ca, "--cert-file", pki.clientCert); code != 2 ||
		!strings.Contains(text, "--cert-file and --key-file go together") {
		t.Fatalf("--cert-file without --key-file: exit %d\n%s", code, text)
	}
}
