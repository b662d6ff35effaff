package main

// The rules of change 60 (docs/protocol.md): shared holdings, readers–
// writer locks and semaphores. They join Catalogue at init.
var modeMutants = []Mutant{
	{"mode-reader-passes-writers", "change 60: a reader passes only readers", "bakery/listen.go",
		"\tif a.holding.Mode == wire.ModeShared && a.holding.Compatible(wire.HoldingOf(st)) {\n\t\treturn true\n", "\tif a.holding.Mode == wire.ModeShared {\n\t\treturn true\n"},
	{"mode-capacity-plus-one", "change 60: a holder of k permits enters only while fewer than k compatible members are ahead", "bakery/listen.go",
		"capacity > 0 && counted >= capacity", "capacity > 0 && counted > capacity"},
	{"mode-compatible-blocks", "change 60: a compatible member ahead counts against the capacity, it does not block", "bakery/listen.go",
		"\t\tcase a.holding.Compatible(wire.HoldingOf(r.best)):\n\t\t\tcounted++\n", ""},
	{"mode-permits-held", "change 60: a permits attempt listens unheld", "bakery/listen.go",
		"\treturn a.tryOnly || a.holding.Mode == wire.ModePermits ||", "\treturn a.tryOnly ||"},
	{"mode-any-k-compatible", "change 60: permits are compatible only with permits of the same count", "wire/mode.go",
		"o.Mode == ModePermits && o.Permits == h.Permits", "o.Mode == ModePermits"},
	{"mode-exit-carries-mode", "change 60: an Exit carries no mode", "wire/mode.go",
		"case p == PhaseExit && (h.Mode != ModeExclusive || h.Permits != 0):", "case false:"},
	{"mode-one-permit", "change 60: a semaphore has 2 to MaxPermits permits", "wire/mode.go",
		"if h.Permits < 2 || h.Permits > MaxPermits {", "if h.Permits < 1 || h.Permits > MaxPermits {"},
	{"mode-mixed-attempt", "change 60: a Ticket or Held of another mode than its attempt's statement here is refused", "server/core/core.go",
		"\t\twire.HoldingOf(prev.St) != wire.HoldingOf(st) {", "\t\twire.HoldingOf(prev.St) != wire.HoldingOf(st) && false {"},
	{"mode-shared-proclaims", "change 60: only an exclusive holder proclaims", "server/core/proclaim.go",
		"\tif held.Mode != wire.ModeExclusive {", "\tif false {"},
	{"mode-reader-not-settled", "change 60 with change 15: a reader's Listen is settled by a reader's statement", "server/core/clients.go",
		"\t\tcase h.Mode == wire.ModeShared && h.Compatible(wire.HoldingOf(en.St)):\n\t\t\treturn true\n", ""},
	{"mode-listener-mode-ignored", "change 60 with change 27: a held Listen is settled by its client's own mode", "server/core/clients.go",
		"settledFor(bakery.Token{N: own.St.N, Client: c}, wire.HoldingOf(own.St))", "settledFor(bakery.Token{N: own.St.N, Client: c}, wire.Holding{})"},
	{"mode-old-servers-ignored", "change 60 with change 19: a shared or permits Lock needs q servers of protocol 1.9", "shared.go",
		"\tif len(v.ids)-len(old) >= v.q {", "\tif true {"},
}

func init() { Catalogue = append(Catalogue, modeMutants...) }
