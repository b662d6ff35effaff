package crypto

// VerifyUncached is Verify without the verdict memo, for the benchmarks of
// the verifiers themselves.
func (p *Parsed) VerifyUncached(domain Domain, body, sig []byte) bool {
	if len(sig) != p.sch.SignatureSize() {
		return false
	}
	return p.verify(domain, body, sig)
}
