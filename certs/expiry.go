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
// within ExpiryNotice of now or has ended: the cluster CA in force, each
// certificate of a member of chain's newest epoch (chain nil: the cluster
// file's) — which ends with its issuer when a rotation retired that CA and
// it ends first — and adm, the client's own admission certificate (nil:
// none). Pure: the caller gives the time.
func Expiring(c *Cluster, chain *wire.Chain, adm *wire.AdmissionBody, now time.Time) []string {
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
	ca := c.CA
	if chain != nil {
		ca, _ = c.CAInForce(chain)
	}
	if ca != nil {
		note("the cluster CA certificate", ca.NotAfter, operator)
	}
	var members Members
	if chain != nil {
		members, _ = c.MembersOf(chain, chain.Number())
	} else {
		members, _ = c.MembersOf(nil, 0)
	}
	for _, s := range members.Servers {
		if s.Cert == nil {
			continue
		}
		end, what := s.Cert.NotAfter, fmt.Sprintf("server %d's certificate", s.ID)
		if issuer, inForce := c.IssuerOf(chain, s.Cert); issuer != nil && !inForce && issuer.NotAfter.Before(end) {
			end, what = issuer.NotAfter, fmt.Sprintf("the retired cluster CA that issued server %d's certificate", s.ID)
		}
		note(what, end, operator)
	}
	if adm != nil {
		note(fmt.Sprintf("this identity's admission certificate (%q)", adm.Name), time.UnixMilli(adm.NotAfter),
			fmt.Sprintf("ask the cluster's operator to renew it (bqserver client renew %s)", adm.Name))
	}
	return out
}
