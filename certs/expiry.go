package certs

import (
	"fmt"
	"time"

	"github.com/bq-lock/bq/wire"
)

// ExpiryNotice is how long before its end a certificate is pointed out to
// the people who depend on it.
const ExpiryNotice = 30 * 24 * time.Hour

// Expiring words every certificate a client of c depends on that ends
// within ExpiryNotice of now or has ended: the cluster CA, each server's
// certificate, and adm, the client's own admission certificate (nil: none).
// Pure: the caller gives the time.
func Expiring(c *Cluster, adm *wire.AdmissionBody, now time.Time) []string {
	var out []string
	note := func(what string, end time.Time, todo string) {
		left := end.Sub(now)
		switch {
		case left <= 0:
			out = append(out, fmt.Sprintf("%s expired on %s: %s", what, end.UTC().Format(time.RFC3339), todo))
		case left < ExpiryNotice:
			out = append(out, fmt.Sprintf("%s expires in %d days, on %s: %s", what, int(left/(24*time.Hour)), end.UTC().Format(time.RFC3339), todo))
		}
	}
	const operator = "tell the cluster's operator"
	if c.CA != nil {
		note("the cluster CA certificate", c.CA.NotAfter, operator)
	}
	for _, s := range c.Servers {
		if s.Cert != nil {
			note(fmt.Sprintf("server %d's certificate", s.ID), s.Cert.NotAfter, operator)
		}
	}
	if adm != nil {
		note(fmt.Sprintf("this identity's admission certificate (%q)", adm.Name), time.UnixMilli(adm.NotAfter),
			fmt.Sprintf("ask the cluster's operator to renew it (bqserver client renew %s)", adm.Name))
	}
	return out
}
