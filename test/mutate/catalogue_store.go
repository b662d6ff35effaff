package main

// The store's integrity rules of issue 57 (docs/protocol.md change 69):
// each weakened by one here is killed by a test of server/store, a unit
// package. They join Catalogue at init.
var storeMutants = []Mutant{
	// (1) Sealed values.
	{"seal-tag-not-checked", "change 69 (1): every value read from bbolt matches its tag", "server/store/seal.go",
		"return value, bytes.Equal(stored[len(stored)-tagLen:], s.tag(prefix, key, value))", "return value, true"},
	{"get-tag-not-checked", "change 69 (1): Get checks the tag of what it reads", "server/store/store.go",
		"v, ok := newSealer().open(sealPrefix(bucket), key, stored)", "v, ok := stored[:len(stored)-tagLen], true"},
	{"foreach-tag-not-checked", "change 69 (1): ForEach checks the tag of what it reads", "server/store/store.go",
		"if _, ok := sl.open(prefix, k, stored); !ok {", "if _, ok := sl.open(prefix, k, stored); false && !ok {"},
	{"open-bolt-check-skipped", "change 69 (1): Open runs bbolt's check, which finds a damaged branch key that no tag covers", "server/store/digest.go",
		"for err := range tx.Check() {", "for _, err := range []error(nil) {"},
	// (2) The digest of the whole store.
	{"digest-not-compared", "change 69 (2): Open refuses a file whose values' digest is not the one stored", "server/store/digest.go",
		"if sum != st.digest {", "if false && sum != st.digest {"},
	{"digest-old-tag-kept", "change 69 (2): a put or delete takes the old value's tag out of the digest", "server/store/digest.go",
		"w.state.digest.remove(storedTag(old))", "_ = old"},
	// (3) The WAL's marker vouches for bbolt.
	{"marker-applied-not-compared", "change 69 (3): Open refuses a bbolt file whose applied is below the WAL marker's", "server/store/wal.go",
		"case isMarker && st.applied < m.applied:", "case isMarker && st.applied < m.applied && false:"},
	{"marker-digest-not-compared", "change 69 (3): at the marker's applied, the bbolt file has the marker's digest", "server/store/wal.go",
		"case isMarker && st.applied == m.applied && st.digest != m.digest:", "case isMarker && st.applied == m.applied && st.digest != m.digest && false:"},
	{"unmarked-pass-accepted", "change 69 (3): a WAL pass with records not in bbolt begins with its marker", "server/store/wal.go",
		"case !isMarker && i == 0 && !migrated && chain[len(chain)-1].seq > st.applied:", "case !isMarker && i == 0 && !migrated && chain[len(chain)-1].seq > st.applied && false:"},
	{"marker-inside-chain-accepted", "change 69 (3): a marker only begins a pass, it is never inside one", "server/store/wal.go",
		"case isMarker && i > 0:", "case isMarker && i > 0 && false:"},
	// (4) A chain that ends early is corruption.
	{"early-chain-end-ignored", "change 69 (4): a valid record of the chain's pass beyond its end means a damaged record", "server/store/wal.go",
		"if r, ok := strayRecord(buf, c.end(), c.pass, c.seq); ok {", "if r, ok := strayRecord(buf, c.end(), c.pass, c.seq); ok && false {"},
	{"damaged-marker-ignored", "change 69 (4): a damaged marker leaves no chain, and the records of its pass are still found", "server/store/wal.go",
		"if r, ok := strayRecord(buf, 0, pass, st.applied); ok {", "if r, ok := strayRecord(buf, 0, pass, st.applied); ok && false {"},
	{"lost-marker-ignored", "change 69 (4): a lost marker leaves the old pass's marker as the chain, and the records of the new pass are still found", "server/store/wal.go",
		"if pass == 0 || len(chain) > 0 && pass == chain[0].pass {", "if pass == 0 || len(chain) > 0 {"},
	// (5) Fail-stop.
	{"sync-failure-not-fatal", "change 69 (5): a failed fdatasync fails the store for good; it is never retried", "server/store/commit.go",
		"\t\treturn false, s.fail(fmt.Errorf(\"store: sync WAL: %w\", err), true)", "\t\treturn false, fmt.Errorf(\"%w: store: sync WAL: %w\", ErrUncertain, err)"},
	{"failure-not-kept", "change 69 (5): a store that failed stays failed: every later Commit fails", "server/store/failure.go",
		"\tif s.failure == nil {\n\t\ts.failure = first", "\tif false && s.failure == nil {\n\t\ts.failure = first"},
	{"bolt-sync-enospc-retried", "change 69 (5): only a write that finds no space is retried, never an fdatasync that says ENOSPC", "server/store/failure.go",
		"func isNoSpace(err error) bool {\n", "func isNoSpace(err error) bool {\n\tif errors.Is(err, syscall.ENOSPC) {\n\t\treturn true\n\t}\n"},
	{"io-error-retried", "change 69 (5): an I/O error on a write fails the store; only ENOSPC and EDQUOT are retried", "server/store/failure.go",
		"return errors.Is(pe.Err, syscall.ENOSPC) || errors.Is(pe.Err, syscall.EDQUOT)", "return true"},
	// (6) Scrub.
	{"scrub-ignores-bad-tag", "change 69 (6): the scrub checks every tag, and a bad one fails the store", "server/store/scrub.go",
		"if _, ok := sl.open(prefix, k, v); !ok {", "if _, ok := sl.open(prefix, k, v); false && !ok {"},
	{"scrub-resumes-at-last-key", "change 69 (6): a scrub's chunk resumes after the last key checked, each value once a pass", "server/store/scrub.go",
		"\t\t\t\tk, v = c.Next()\n", "\t\t\t\tk, v = c.Seek(pos.key)\n"},
	{"scrub-digest-not-compared", "change 69 (6): at the end of a pass in which the file did not change, the scrub compares the digest", "server/store/scrub.go",
		"if pos.sum != st.digest {", "if false && pos.sum != st.digest {"},
	{"scrub-digest-despite-writes", "change 69 (6): the scrub compares no digest over chunks of different versions of the file", "server/store/scrub.go",
		"\tif !pos.changed {\n", "\tif true {\n"},
	// A store of before.
	{"old-file-not-sealed", "change 69: a bbolt file of before is sealed at its first Open, every value of it", "server/store/migrate.go",
		"for _, p := range pairs {", "for _, p := range pairs[:0] {"},
}

func init() { Catalogue = append(Catalogue, storeMutants...) }
