// Command mutate is bq's source-level mutation check: it weakens one rule of
// the protocol at a time, by editing one line of a copy of the repository,
// and requires the fast tests to notice.
//
//	go run ./test/mutate                  # every mutant of the catalogue
//	go run ./test/mutate -run 'absence|lease'
//	go run ./test/mutate -list            # the catalogue: name, rule, file
//	go run ./test/mutate -campaign 40     # add 40 bqsim seeds for mutants the tests miss
//	go run ./test/mutate -sim=false       # the unit packages alone must kill every mutant
//	go run ./test/mutate -j 2             # two mutants at once (CI)
//	go run ./test/mutate -sim=false -run '^absence-q-1$' -tests '^TestPassableRule$'   # does this test kill it?
//
// Each mutant (catalogue.go) names the rule of docs/protocol.md it weakens, a file,
// an exact snippet that must occur in that file exactly once, and its
// replacement. For each selected mutant the tool copies the repository's
// files (git ls-files: tracked, plus untracked files that are not ignored)
// to a fresh temporary directory, makes the one replacement there, and runs
//
//  1. go test -short -count=1 -failfast over the mutated file's own package
//     alone (for a package outside unitPackages, its ownTests), then, if the
//     mutant survives, over the other unit packages (unitPackages);
//  2. if they pass, the fast tests of ./test/sim (simTests);
//  3. if those pass too and -campaign N > 0, go run ./test/cmd/bqsim -seeds N
//     -byzantine all -j 1.
//
// The first test that fails kills the mutant. Builds share the user's
// GOCACHE and use -trimpath, so each copy rebuilds only what the mutant
// touched. With -j N, N mutants are tested at once (one go command each);
// the output keeps the catalogue's order.
//
// Output: one line per mutant, "killed   NAME  by TestX (pkg)" or "SURVIVED
// NAME  (rule ...)", then "mutants=M killed=K survived=S wall=D". The exit
// status is 1 if a mutant survived, 2 if the catalogue is out of step with
// the code (a snippet not found exactly once), a mutant does not build, or
// the unmutated copy fails its own tests.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type options struct {
	root     string
	campaign int
	keep     bool
	verbose  bool
	sim      bool
	baseline bool
	tests    string
	jobs     int
	timeout  time.Duration
	out      io.Writer
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mutate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runRE := fs.String("run", "", "select mutants whose name matches this regular expression")
	list := fs.Bool("list", false, "print the catalogue and exit")
	campaign := fs.Int("campaign", 0, "bqsim seeds (-byzantine all -j 1) for a mutant the tests miss; 0 skips the campaign")
	keep := fs.Bool("keep", false, "keep the temporary copy of each surviving mutant (its path is printed)")
	verbose := fs.Bool("v", false, "print the commands, the time per mutant, and the output of failing runs")
	sim := fs.Bool("sim", true, "run the fast test/sim tests when the unit packages pass")
	baseline := fs.Bool("baseline", true, "first run the tests on an unmutated copy (they must pass)")
	root := fs.String("root", "", "repository root (default: git rev-parse --show-toplevel)")
	tests := fs.String("tests", "", "run only the unit tests matching this regular expression (go test -run): to check that one test kills a mutant")
	jobs := fs.Int("j", 1, "mutants tested at once, each in its own copy of the tree (CI: 2, one per core)")
	timeout := fs.Duration("timeout", 2*time.Minute, "limit for each go test run (a mutant that makes a test hang is killed by the timeout)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mutate: unexpected arguments %q\n", fs.Args())
		return 2
	}
	var sel *regexp.Regexp
	if *runRE != "" {
		var err error
		if sel, err = regexp.Compile(*runRE); err != nil {
			fmt.Fprintln(stderr, "mutate: -run:", err)
			return 2
		}
	}
	var mutants []Mutant
	for _, m := range Catalogue {
		if sel == nil || sel.MatchString(m.Name) {
			mutants = append(mutants, m)
		}
	}
	if *list {
		for _, m := range mutants {
			fmt.Fprintf(stdout, "%-30s %-34s %s\n", m.Name, m.File, m.Rule)
		}
		return 0
	}
	if len(mutants) == 0 {
		fmt.Fprintln(stderr, "mutate: no mutant matches -run", *runRE)
		return 2
	}
	opt := options{campaign: *campaign, keep: *keep, verbose: *verbose, sim: *sim, baseline: *baseline, tests: *tests, jobs: *jobs, timeout: *timeout, out: stdout}
	if opt.root = *root; opt.root == "" {
		out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			fmt.Fprintln(stderr, "mutate: not in a git repository (use -root):", err)
			return 2
		}
		opt.root = strings.TrimSpace(string(out))
	}
	if abs, err := filepath.Abs(opt.root); err == nil {
		opt.root = abs
	}
	// The catalogue must match the code before anything runs.
	if errs := CheckCatalogue(opt.root, mutants); len(errs) > 0 {
		for _, err := range errs {
			fmt.Fprintln(stderr, "mutate:", err)
		}
		fmt.Fprintln(stderr, "mutate: the catalogue (test/mutate/catalogue.go) is out of step with the code")
		return 2
	}
	return runAll(opt, mutants, stderr)
}

func runAll(opt options, mutants []Mutant, stderr io.Writer) int {
	start := time.Now()
	files, err := repoFiles(opt.root)
	if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 2
	}
	env, err := goEnv()
	if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 2
	}
	r := &runner{opt: opt, files: files, env: env}
	if opt.baseline {
		t0 := time.Now()
		res, err := r.try(nil)
		if err != nil {
			fmt.Fprintln(stderr, "mutate: baseline:", err)
			return 2
		}
		if res.killed() {
			fmt.Fprintf(stderr, "mutate: the unmutated copy fails: %s\n%s", res.by(), res.detail)
			return 2
		}
		if opt.verbose {
			fmt.Fprintf(opt.out, "baseline passes (%s)\n", time.Since(t0).Round(100*time.Millisecond))
		}
	}
	// Up to opt.jobs mutants run at once, each in its own copy; the lines
	// come out in the catalogue's order all the same.
	type outcome struct {
		res  *result
		err  error
		took time.Duration
	}
	outs := make([]chan outcome, len(mutants))
	for i := range outs {
		outs[i] = make(chan outcome, 1)
	}
	go func() {
		slots := make(chan struct{}, max(1, opt.jobs))
		for i := range mutants {
			slots <- struct{}{}
			go func() {
				defer func() { <-slots }()
				t0 := time.Now()
				res, err := r.try(&mutants[i])
				outs[i] <- outcome{res, err, time.Since(t0)}
			}()
		}
	}()
	killed, survived, broken := 0, 0, 0
	for i, m := range mutants {
		o := <-outs[i]
		res, err := o.res, o.err
		took := ""
		if opt.verbose {
			took = "  [" + o.took.Round(100*time.Millisecond).String() + "]"
		}
		switch {
		case err != nil:
			broken++
			fmt.Fprintf(opt.out, "BROKEN   %-30s %v%s\n", m.Name, err, took)
		case res.killed():
			killed++
			fmt.Fprintf(opt.out, "killed   %-30s by %s%s\n", m.Name, res.by(), took)
			if opt.verbose {
				fmt.Fprint(opt.out, indent(lastLines(res.detail, 12)))
			}
		default:
			survived++
			fmt.Fprintf(opt.out, "SURVIVED %-30s (rule %s)%s\n", m.Name, m.Rule, took)
			if res.kept != "" {
				fmt.Fprintf(opt.out, "         kept in %s\n", res.kept)
			}
		}
	}
	line := fmt.Sprintf("mutants=%d killed=%d survived=%d", len(mutants), killed, survived)
	if broken > 0 {
		line += fmt.Sprintf(" broken=%d", broken)
	}
	fmt.Fprintf(opt.out, "%s wall=%s\n", line, time.Since(start).Round(time.Second))
	switch {
	case broken > 0:
		return 2
	case survived > 0:
		return 1
	}
	return 0
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "         " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n         ") + "\n"
}
