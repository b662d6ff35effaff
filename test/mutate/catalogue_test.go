package main

import (
	"strings"
	"testing"
)

// The catalogue cannot rot silently: every mutant's snippet occurs exactly
// once in its file, names are unique, and every mutant names its rule. It
// reads files only (no build, no go command), so it runs in milliseconds.
func TestCatalogueMatchesCode(t *testing.T) {
	if len(Catalogue) < 32 {
		t.Errorf("the catalogue has %d mutants, want at least 32", len(Catalogue))
	}
	for _, err := range CheckCatalogue("../..", Catalogue) {
		t.Error(err)
	}
	names := make(map[string]bool)
	for _, m := range Catalogue {
		names[m.Name] = true
	}
	for name := range ownTests {
		if !names[name] {
			t.Errorf("ownTests names %s, which is no mutant of the catalogue", name)
		}
	}
	for _, m := range Catalogue {
		if !strings.Contains(m.Rule, "§") && !strings.Contains(m.Rule, "change ") {
			t.Errorf("mutant %s: the rule %q names no section of docs/protocol.md or change of docs/protocol.md", m.Name, m.Rule)
		}
	}
}

// CheckCatalogue reports what it exists to catch.
func TestCheckCatalogueFindsProblems(t *testing.T) {
	bad := []Mutant{
		{Name: "twice", Rule: "§1", File: "test/mutate/catalogue.go", From: "package main", To: "package mutant"},
		{Name: "twice", Rule: "§1", File: "test/mutate/catalogue.go", From: "no such snippet anywhere \x00", To: "x"},
		{Name: "missing-file", Rule: "§1", File: "no/such/file.go", From: "a", To: "b"},
		{Name: "no-op", Rule: "", File: "test/mutate/catalogue.go", From: "package main", To: "package main"},
	}
	errs := CheckCatalogue("../..", bad)
	var all []string
	for _, err := range errs {
		all = append(all, err.Error())
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{"name is used twice", "0 times", "no/such/file.go", "no rule", "changes nothing"} {
		if !strings.Contains(joined, want) {
			t.Errorf("CheckCatalogue did not report %q; it said:\n%s", want, joined)
		}
	}
}

// The go test -json parser names the first failing test, or a build failure.
func TestParseTestJSON(t *testing.T) {
	out := strings.Join([]string{
		`{"Action":"run","Package":"github.com/bq-lock/bq/quorum","Test":"TestA"}`,
		`{"Action":"output","Package":"github.com/bq-lock/bq/quorum","Test":"TestA","Output":"--- FAIL: TestA/sub (0.00s)\n"}`,
		`{"Action":"fail","Package":"github.com/bq-lock/bq/quorum","Test":"TestA/sub"}`,
		`{"Action":"fail","Package":"github.com/bq-lock/bq/quorum","Test":"TestA"}`,
		`{"Action":"fail","Package":"github.com/bq-lock/bq/quorum"}`,
		`{"Action":"fail","Package":"github.com/bq-lock/bq/bakery","Test":"TestB"}`,
	}, "\n")
	f := parseTestJSON(out)
	if f.test != "TestA/sub" || f.pkg != "quorum" || f.buildFailed != "" {
		t.Errorf("got %+v, want TestA/sub in quorum", f)
	}
	f = parseTestJSON(`{"ImportPath":"github.com/bq-lock/bq/quorum","Action":"build-output","Output":"x.go:1: undefined: y\n"}
{"ImportPath":"github.com/bq-lock/bq/quorum","Action":"build-fail"}
{"Action":"fail","Package":"github.com/bq-lock/bq/quorum","FailedBuild":"github.com/bq-lock/bq/quorum"}`)
	if f.buildFailed == "" || !strings.Contains(f.buildOutput, "undefined") {
		t.Errorf("a build failure was not reported: %+v", f)
	}
	f = parseTestJSON(`{"Action":"output","Package":"github.com/bq-lock/bq/server/store","Output":"panic: test timed out\n"}
{"Action":"fail","Package":"github.com/bq-lock/bq/server/store"}`)
	if f.test != "" || f.pkg != "server/store" || !strings.Contains(f.output, "timed out") {
		t.Errorf("a package failure outside any test: got %+v", f)
	}
	f = parseTestJSON(`{"Action":"output","Package":"github.com/bq-lock/bq/bakery","Output":"panic: test timed out after 2m0s\n"}
{"Action":"output","Package":"github.com/bq-lock/bq/bakery","Output":"\trunning tests:\n"}
{"Action":"output","Package":"github.com/bq-lock/bq/bakery","Output":"\t\tTestPassableRule (2m0s)\n"}
{"Action":"fail","Package":"github.com/bq-lock/bq/bakery"}`)
	if f.test != "TestPassableRule (timed out)" || f.pkg != "bakery" {
		t.Errorf("a timeout: got %+v", f)
	}
	if got := campaignKiller("FAIL seed=17 n=4 [mutual-exclusion] at 1.2s: two holders (and 3 more)"); got != "bqsim seed=17 [mutual-exclusion]" {
		t.Errorf("campaignKiller: %q", got)
	}
}
