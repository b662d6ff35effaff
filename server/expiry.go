package server

import (
	"crypto/x509"

	"github.com/bq-lock/bq/server/metrics"
)

// Certificate expiry as the server runs (issue 28): the cluster CA in force
// and this server's own certificate, which expires with its issuer when a
// CA rotation retired that CA. A rotation changes the CA in force while the
// server runs, so followEpochs calls noteCertificates again; the metric is
// set and the daily warning reads what was noted last.

// noteCertificates works out the certificates the server depends on from
// the epochs the core knows, sets their metric and keeps them for the
// daily warning. Only the loop calls it (it reads the core's chain).
func (s *Server) noteCertificates() {
	cl, leaf := s.Material.Cluster, s.Material.TLS.Leaf
	inForce, retired := cl.CA, (*x509.Certificate)(nil)
	if k, ok := s.core.(epochCore); ok && k.Chain() != nil {
		inForce, _ = cl.CAInForce(k.Chain())
		if issuer, current := cl.IssuerOf(k.Chain(), leaf); issuer != nil && !current {
			retired = issuer
		}
	}
	certs := metrics.ServerCertificates(inForce, leaf, retired)
	s.metrics.SetCertificateExpiry(certs)
	s.certificates.Store(&certs)
}

// dependsOn is what noteCertificates noted last; any goroutine may call it.
func (s *Server) dependsOn() []metrics.Certificate { return *s.certificates.Load() }
