package main

// The server's side of fail-stop on a disk that rots (docs/protocol.md
// change 69, rules 5 and 6): each weakened by one here is killed by a test
// of server/core (a unit package) or by the named test of its own package
// (./server or ./cmd/bqserver, real servers in one process). They join
// Catalogue at init.
var failstopMutants = []Mutant{
	{"failstop-store-not-watched", "change 69 (5): a server stops as soon as its store fails, found by any reader (the scrub)", "server/server.go",
		"\tgo s.watchStore(ctx)\n", "\t_ = s.watchStore\n"},
	{"failstop-keeps-answering", "change 69 (5): a server whose store failed stops answering at once", "server/failstop.go",
		"\t\t_ = s.transport.Close()\n\t\ts.cancel()", "\t\ts.cancel()"},
	{"scrub-never-runs", "change 69 (6): a running server scrubs its whole store in the background", "server/scrub.go",
		"\tif rate <= 0 {\n\t\treturn\n\t}", "\tif rate <= 0 || true {\n\t\treturn\n\t}"},
	{"corrupt-mark-not-written", "change 69 (5): after an integrity failure the server writes its CORRUPT mark", "server/failstop.go",
		"\tif !errors.Is(cause, store.ErrCorrupt) {\n\t\treturn nil\n\t}\n\ttext", "\tif true {\n\t\treturn nil\n\t}\n\ttext"},
	{"corrupt-mark-ignored-at-start", "change 69 (5): a server refuses to start while its CORRUPT mark is there", "server/server.go",
		"if err := checkCorruptMark(m.Dir); err != nil {", "if err := checkCorruptMark(m.Dir); false && err != nil {"},
	{"store-failure-exit-not-9", "change 69 (5): bqserver run exits 9 when the store failed", "cmd/bqserver/run.go",
		"\t\t\t\tif errors.Is(err, store.ErrFailed) {\n\t\t\t\t\treturn &cli.Exit{Code: exitStoreFailed", "\t\t\t\tif false && errors.Is(err, store.ErrFailed) {\n\t\t\t\t\treturn &cli.Exit{Code: exitStoreFailed"},
	{"restore-ban-read-error-ignored", "change 69 (5): Restore stops on a read error of the store, here of the bans", "server/core/persist.go",
		"\tif err != nil {\n\t\treturn fmt.Errorf(\"core: restoring bans: %w\", err)", "\tif false && err != nil {\n\t\treturn fmt.Errorf(\"core: restoring bans: %w\", err)"},
	{"restore-hw-read-error-ignored", "change 69 (5): Restore stops on a read error of the store, here of the high-water marks", "server/core/persist.go",
		"\tif err != nil {\n\t\treturn fmt.Errorf(\"core: restoring high-water marks: %w\", err)", "\tif false && err != nil {\n\t\treturn fmt.Errorf(\"core: restoring high-water marks: %w\", err)"},
	{"corrupt-not-listed", "change 69 (5): server list shows a member that marked itself corrupt", "cmd/bqserver/server.go",
		"if why, ok := server.CorruptMark(sdir); ok {", "if why, ok := server.CorruptMark(sdir); false && ok {"},
}

func init() {
	Catalogue = append(Catalogue, failstopMutants...)
	for name, tests := range map[string]string{
		"failstop-store-not-watched":    "^TestScrubFindsRotAndTheServerStops$",
		"failstop-keeps-answering":      "^TestScrubFindsRotAndTheServerStops$",
		"scrub-never-runs":              "^TestScrubFindsRotAndTheServerStops$",
		"corrupt-mark-not-written":      "^(TestScrubFindsRotAndTheServerStops|TestStartFindsRotAndMarksTheServer)$",
		"corrupt-mark-ignored-at-start": "^TestStartFindsRotAndMarksTheServer$",
		"store-failure-exit-not-9":      "^TestACorruptMarkStopsRunAndShowsInServerList$",
		"corrupt-not-listed":            "^TestACorruptMarkStopsRunAndShowsInServerList$",
	} {
		ownTests[name] = tests
	}
}
