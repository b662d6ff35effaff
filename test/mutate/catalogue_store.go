package main

// The store's integrity rules of issue 57 (docs/protocol.md change 69):
// each weakened by one here is killed by a test of server/store, a unit
// package. They join Catalogue at init.
var storeMutants = []Mutant{
	// (5) Fail-stop.
	{"sync-failure-not-fatal", "change 69 (5): a failed fdatasync fails the store for good; it is never retried", "server/store/commit.go",
		"\t\treturn false, s.fail(fmt.Errorf(\"store: sync WAL: %w\", err), true)", "\t\treturn false, fmt.Errorf(\"%w: store: sync WAL: %w\", ErrUncertain, err)"},
	{"failure-not-kept", "change 69 (5): a store that failed stays failed: every later Commit fails", "server/store/failure.go",
		"\tif s.failure == nil {\n\t\ts.failure = first", "\tif false && s.failure == nil {\n\t\ts.failure = first"},
	{"bolt-sync-enospc-retried", "change 69 (5): only a write that finds no space is retried, never an fdatasync that says ENOSPC", "server/store/failure.go",
		"func isNoSpace(err error) bool {\n", "func isNoSpace(err error) bool {\n\tif errors.Is(err, syscall.ENOSPC) {\n\t\treturn true\n\t}\n"},
	{"io-error-retried", "change 69 (5): an I/O error on a write fails the store; only ENOSPC and EDQUOT are retried", "server/store/failure.go",
		"return errors.Is(pe.Err, syscall.ENOSPC) || errors.Is(pe.Err, syscall.EDQUOT)", "return true"},
}

func init() { Catalogue = append(Catalogue, storeMutants...) }
