package main

// The reconfiguration rules of issue 54, item 5: each weakened by one here
// is killed by a fast test of its own package (docs/protocol.md changes 43,
// 47, 49, 52, 57). They join Catalogue at init.
var pinMutants = []Mutant{
	{"epoch-highest-id-reused", "change 43: ids are never reused, the highest ever used included", "wire/epoch.go",
		"\tfor id := ServerID(0); id <= c.maxID; id++ {", "\tfor id := ServerID(0); id < c.maxID; id++ {"},
	{"epoch-next-ca-any-cert", "change 43: an epoch's next CA is a CA certificate", "wire/epoch.go",
		"if !ok || !cert.IsCA {", "if !ok {"},
}

func init() { Catalogue = append(Catalogue, pinMutants...) }
