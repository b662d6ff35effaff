package crypto

// VerifyUncached is Verify as the scheme's verifier decides it, for the
// benchmarks of the verifiers themselves.
func (p *Parsed) VerifyUncached(domain Domain, body, sig []byte) bool {
	if len(sig) != p.sch.SignatureSize() {
		return false
	}
	return p.Verify(domain, body, sig)
}
