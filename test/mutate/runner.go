package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// unitPackages are the packages whose tests run first against every mutant:
// the rules' own packages, all fast (a few seconds in total with -short).
var unitPackages = []string{
	"./quorum", "./bakery", "./omega", "./activeset", "./detector",
	"./crypto", "./wire", "./server/core", "./server/store", "./certs",
}

// simTests are the tests of ./test/sim that run in under about 2.5 s each
// with -short (measured on a 2-core machine: 5 s together). TestScenarios
// (10 s) and TestMutationsAreCaught (25 s) are left to the full suite.
const simTests = "^(TestMaliciousClients|TestCampaignRegressions|TestInflationContained|TestForeignClusterReplay|" +
	"TestDeterminism|TestSilentHolderIsReset|TestSuspectAllNeverResets|TestCrashRestartDurability|" +
	"TestCheckerTeeth|TestBehaviors|TestOverflowRepaired|TestOwnSignaturesReused|TestDripFeedEnds|" +
	"TestReplaceUnderContention|TestCampaignCopiesComeInParts|TestALeakedCAKeyFreezesNoChangeOfAnOpenRun|" +
	"TestSealedMembersPoolEndorsementsRegressions)$"

type runner struct {
	opt   options
	files []string
	env   []string
}

// result is what the tests did to one mutant.
type result struct {
	test   string // the first failing test (or "bqsim seed=S"), "" if none failed
	pkg    string
	detail string // the failing output, for -v
	kept   string // the copy kept for -keep
}

func (r *result) killed() bool { return r.test != "" }

func (r *result) by() string { return fmt.Sprintf("%s (%s)", r.test, r.pkg) }

// repoFiles lists the repository's files as git sees them: tracked ones
// that still exist, and untracked ones that are not ignored.
func repoFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	seen := make(map[string]bool)
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		if fi, err := os.Lstat(filepath.Join(root, f)); err == nil && fi.Mode().IsRegular() {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return nil, errors.New("git ls-files lists no files")
	}
	return files, nil
}

// goEnv is the environment of every go command: the user's, with GOCACHE
// pinned to the user's build cache so every copy shares it.
func goEnv() ([]string, error) {
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOCACHE: %w", err)
	}
	cache := strings.TrimSpace(string(out))
	if cache == "" || cache == "off" {
		return nil, errors.New("the Go build cache is off: every mutant would rebuild everything")
	}
	env := append(os.Environ(), "GOCACHE="+cache)
	return env, nil
}

// copyTree copies files from root into a new temporary directory.
func (r *runner) copyTree() (string, error) {
	dir, err := os.MkdirTemp("", "bq-mutate-")
	if err != nil {
		return "", err
	}
	for _, f := range r.files {
		src, dst := filepath.Join(r.opt.root, f), filepath.Join(dir, f)
		fi, err := os.Stat(src)
		if err != nil {
			_ = os.RemoveAll(dir)
			return "", err
		}
		b, err := os.ReadFile(src)
		if err == nil {
			err = os.MkdirAll(filepath.Dir(dst), 0o755)
		}
		if err == nil {
			err = os.WriteFile(dst, b, fi.Mode().Perm())
		}
		if err != nil {
			_ = os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// apply makes m's one replacement in the copy at dir.
func apply(dir string, m *Mutant) error {
	path := filepath.Join(dir, m.File)
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if n := strings.Count(string(b), m.From); n != 1 {
		return fmt.Errorf("%s: the snippet %q occurs %d times, want exactly 1", m.File, m.From, n)
	}
	return os.WriteFile(path, []byte(strings.Replace(string(b), m.From, m.To, 1)), 0o644)
}

// try runs the stages against a copy with mutant m (nil: unmutated). An
// error means the run proves nothing: the copy could not be made, or the
// mutant does not build.
func (r *runner) try(m *Mutant) (*result, error) {
	dir, err := r.copyTree()
	if err != nil {
		return nil, fmt.Errorf("copying the repository: %w", err)
	}
	res := &result{}
	defer func() {
		if r.opt.keep && m != nil && !res.killed() {
			res.kept = dir
			return
		}
		_ = os.RemoveAll(dir)
	}()
	if m != nil {
		if err := apply(dir, m); err != nil {
			return nil, err
		}
	}
	base := []string{"test", "-short", "-count=1", "-failfast", "-trimpath", "-vet=off", "-json", "-timeout", r.opt.timeout.String()}
	units := append([]string(nil), base...)
	if r.opt.tests != "" {
		units = append(units, "-run", r.opt.tests)
	}
	// The mutated file's own package goes first, alone: it holds the
	// rule's own tests, which kill nearly every mutant, and it builds and
	// runs in a fraction of the time of all the unit packages together.
	// Only a mutant it misses pays for the rest.
	stages := [][]string{append(units, unitPackages...)}
	if m != nil {
		if own := "./" + filepath.Dir(m.File); slices.Contains(unitPackages, own) {
			var rest []string
			for _, p := range unitPackages {
				if p != own {
					rest = append(rest, p)
				}
			}
			stages = [][]string{append(slices.Clone(units), own), append(slices.Clone(units), rest...)}
		}
	}
	if m != nil && ownTests[m.Name] != "" {
		// A package outside the unit packages: its own tests first too.
		own := append(slices.Clone(base), "-run", ownTests[m.Name], "./"+filepath.Dir(m.File))
		stages = append([][]string{own}, stages...)
	}
	if r.opt.sim {
		stages = append(stages, append(append([]string(nil), base...), "-run", simTests, "./test/sim"))
	}
	for _, args := range stages {
		out, stderr, err := r.goCmd(dir, args...)
		if ev := parseTestJSON(out); ev.buildFailed != "" {
			return nil, fmt.Errorf("does not build: %s", firstLines(ev.buildOutput+stderr, 6))
		} else if ev.test != "" || ev.pkg != "" {
			res.test, res.pkg, res.detail = ev.test, ev.pkg, ev.output
			if res.test == "" {
				res.test = "package failure"
			}
			return res, nil
		}
		if err != nil {
			return nil, fmt.Errorf("go %s: %v: %s", strings.Join(args[:2], " "), err, firstLines(stderr, 6))
		}
	}
	if r.opt.campaign > 0 {
		out, stderr, err := r.goCmd(dir, "run", "-trimpath", "./test/cmd/bqsim", "-seeds", fmt.Sprint(r.opt.campaign), "-byzantine", "all", "-j", "1")
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "FAIL seed=") {
				res.test, res.pkg, res.detail = campaignKiller(line), "campaign", line
				return res, nil
			}
		}
		if err != nil {
			return nil, fmt.Errorf("bqsim: %v: %s", err, firstLines(stderr, 6))
		}
	}
	return res, nil
}

// campaignKiller names a failing bqsim run: "bqsim seed=S [checker]".
func campaignKiller(line string) string {
	fields := strings.Fields(line)
	name := "bqsim " + strings.TrimPrefix(fields[1], "FAIL ")
	if m := regexp.MustCompile(`\[([a-z-]+)\]`).FindStringSubmatch(line); m != nil {
		name += " [" + m[1] + "]"
	}
	return name
}

// goCmd runs the go command in dir and returns its stdout and stderr. On
// the timeout the go command's whole process group is killed (its test
// binaries and what they started too, not only go), and Wait returns even if
// something out of the group still holds the output pipes (WaitDelay).
func (r *runner) goCmd(dir string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opt.timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = r.env
	killGroupOnCancel(cmd)
	cmd.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if r.opt.verbose {
		fmt.Fprintf(r.opt.out, "         $ go %s\n", strings.Join(args, " "))
	}
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// testEvent is one line of go test -json (cmd/test2json).
type testEvent struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string
	FailedBuild string
}

// failure is what one go test -json run reports.
type failure struct {
	test, pkg   string // the first failing test and its package; pkg alone: a package failed outside any test
	output      string // the failing test's (or package's) output
	buildFailed string
	buildOutput string
}

func parseTestJSON(out string) failure {
	var f failure
	outputs := make(map[string]*strings.Builder) // package + test → output
	key := func(e *testEvent) string { return e.Package + "\x00" + e.Test }
	var pkgFail string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e testEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		switch e.Action {
		case "build-output":
			f.buildOutput += e.Output
		case "output":
			b := outputs[key(&e)]
			if b == nil {
				b = &strings.Builder{}
				outputs[key(&e)] = b
			}
			if b.Len() < 64<<10 {
				b.WriteString(e.Output)
			}
		case "fail":
			switch {
			case e.FailedBuild != "":
				if f.buildFailed == "" {
					f.buildFailed = e.FailedBuild
				}
			case e.Test != "" && f.test == "":
				f.test, f.pkg = e.Test, shortPkg(e.Package)
				if b := outputs[key(&e)]; b != nil {
					f.output = b.String()
				}
			case e.Test == "" && pkgFail == "":
				pkgFail = e.Package
			}
		}
	}
	if f.test == "" && pkgFail != "" {
		f.pkg = shortPkg(pkgFail)
		if b := outputs[pkgFail+"\x00"]; b != nil {
			f.output = b.String()
		}
		f.test = timedOut(f.output)
	}
	return f
}

// timedOut names the test a package's "test timed out" panic says was
// running ("TestX (timed out)"), or "".
func timedOut(output string) string {
	_, after, ok := strings.Cut(output, "panic: test timed out")
	if !ok {
		return ""
	}
	_, after, ok = strings.Cut(after, "running tests:\n")
	if !ok {
		return ""
	}
	line, _, _ := strings.Cut(after, "\n")
	if name, _, _ := strings.Cut(strings.TrimSpace(line), " "); name != "" {
		return name + " (timed out)"
	}
	return ""
}

func shortPkg(p string) string { return strings.TrimPrefix(p, "github.com/bq-lock/bq/") }

func firstLines(s string, n int) string {
	sc := bufio.NewScanner(strings.NewReader(s))
	var lines []string
	for sc.Scan() && len(lines) < n {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, " | ")
}
