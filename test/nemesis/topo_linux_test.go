package nemesis

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bq-lock/bq/internal/testutil"
)

var requireNetns = flag.Bool("nemesis.require", testutil.PrivilegedRequired(), "fail, instead of skipping, where network namespaces cannot be made (for CI machines that must run the scenarios; also set by "+testutil.RequirePrivilegedEnv+")")

// A topology is a Linux bridge with one network namespace per node, each
// joined to the bridge by a veth pair (eth0 inside), addresses in a private
// /24 chosen per topology. Names carry the topology's tag, bqnNNNL (NNN the
// pid modulo 1000, L a letter): the bridge TAG-br, node X's namespace and
// host-side veth TAG-X (15 bytes at most, as Linux wants).
//
// A tag is owned by whoever holds an flock on tagLockDir/TAG: the test for
// its lifetime, and at its end the cleanup deletes what it made (killing
// the namespaces' processes first), also when the test fails. A test binary
// that died (a go test -timeout, a kill) leaves its tags unlocked: the next
// run's sweep deletes their leftovers, never another live run's.

// partitionMAC is a MAC nobody owns: a frame to it reaches no namespace.
const partitionMAC = "02:00:00:00:00:01"

var tagLockDirs = []string{"/run/bq-nemesis", filepath.Join(os.TempDir(), "bq-nemesis")}

// tagRe matches the names this package makes.
var tagRe = regexp.MustCompile(`^(bqn[0-9]{3}[a-z])-[a-z0-9]+$`)

// node is one namespace.
type node struct {
	name string // s0, c1, ...
	ns   string // its namespace (and its host-side veth)
	ip   string
}

// topo is a bridge and its namespaces.
type topo struct {
	t      *testing.T
	tag    string
	bridge string
	subnet string // 10.A.B
	nodes  []*node
	byName map[string]*node
	lock   *os.File
	lockAt string

	mu   sync.Mutex
	cuts map[[2]string]bool // {from node, to node}: from's entry for to is pinned
}

var sweepOnce sync.Once

// netnsUsable says why this machine cannot make namespaces, or "".
func netnsUsable() string {
	if os.Geteuid() != 0 {
		return "needs root for network namespaces (run the scenarios as root, e.g. sudo -E go test ./test/nemesis)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "needs the ip command (iproute2) for network namespaces: " + err.Error()
	}
	return ""
}

// skipf skips the test, or fails it under -nemesis.require.
func skipf(t *testing.T, format string, args ...any) {
	t.Helper()
	if *requireNetns {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// newTopo makes a topology with a namespace for each name, or skips the test
// where that cannot be done.
func newTopo(t *testing.T, names ...string) *topo {
	t.Helper()
	if why := netnsUsable(); why != "" {
		skipf(t, "%s", why)
	}
	sweepOnce.Do(func() { sweepStale(t) })
	tp := &topo{t: t, byName: map[string]*node{}, cuts: map[[2]string]bool{}}
	if err := tp.claimTag(); err != nil {
		skipf(t, "cannot claim a name for the namespaces: %v", err)
	}
	tp.bridge = tp.tag + "-br"
	tp.subnet = pickSubnet()
	for i, n := range names {
		nd := &node{name: n, ns: tp.tag + "-" + n, ip: fmt.Sprintf("%s.%d", tp.subnet, 10+i)}
		tp.nodes = append(tp.nodes, nd)
		tp.byName[n] = nd
	}
	t.Cleanup(tp.destroy)
	if err := tp.create(); err != nil {
		if strings.Contains(err.Error(), "Operation not permitted") || strings.Contains(err.Error(), "Permission denied") {
			skipf(t, "cannot make network namespaces here: %v", err)
		}
		t.Fatalf("making the topology: %v", err)
	}
	t.Logf("topology %s: bridge %s, subnet %s.0/24, %s", tp.tag, tp.bridge, tp.subnet, tp.describe())
	return tp
}

func (tp *topo) describe() string {
	var s []string
	for _, n := range tp.nodes {
		s = append(s, n.name+"="+n.ip)
	}
	return strings.Join(s, " ")
}

// claimTag takes the first free tag from the pid's number on.
func (tp *topo) claimTag() error {
	var lastErr error
	for _, dir := range tagLockDirs {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			lastErr = err
			continue
		}
		start := os.Getpid() % 1000
		for i := range 1000 {
			for l := 'a'; l <= 'z'; l++ {
				tag := fmt.Sprintf("bqn%03d%c", (start+i)%1000, l)
				f, path, err := lockTag(dir, tag)
				if err != nil {
					lastErr = err
					continue
				}
				if f == nil {
					continue // a live run has it
				}
				tp.tag, tp.lock, tp.lockAt = tag, f, path
				removeTagged(tag) // leftovers of a run that died with this tag
				return nil
			}
		}
	}
	return lastErr
}

// lockTag tries to own tag: an flock on dir/tag, the file still the one at
// that path (a sweeper may have removed it after we opened it). nil, nil:
// someone else owns it.
func lockTag(dir, tag string) (*os.File, string, error) {
	path := filepath.Join(dir, tag)
	for range 5 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, "", err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, "", nil
			}
			return nil, "", err
		}
		var a, b syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &a) == nil && syscall.Stat(path, &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev {
			return f, path, nil
		}
		_ = f.Close()
	}
	return nil, "", nil
}

// unlockTag gives a tag up: the file goes while we hold it.
func unlockTag(f *os.File, path string) {
	_ = os.Remove(path)
	_ = f.Close()
}

// sweepStale deletes the namespaces and links of every tag no live run owns.
func sweepStale(t *testing.T) {
	tags := map[string]bool{}
	for _, name := range taggedNames() {
		tags[tagRe.FindStringSubmatch(name)[1]] = true
	}
	for tag := range tags {
		for _, dir := range tagLockDirs {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				continue
			}
			f, path, err := lockTag(dir, tag)
			if err != nil {
				continue
			}
			if f == nil {
				break // a live run owns it
			}
			t.Logf("sweep: removing the leftovers of %s, which no live run owns", tag)
			removeTagged(tag)
			unlockTag(f, path)
			break
		}
	}
}

// taggedNames lists the namespaces and host links whose names this package makes.
func taggedNames() []string {
	var names []string
	if out, err := runCmd(10*time.Second, "ip", "netns", "list"); err == nil {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && tagRe.MatchString(f[0]) {
				names = append(names, f[0])
			}
		}
	}
	if out, err := runCmd(10*time.Second, "ip", "-o", "link", "show"); err == nil {
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if tagRe.MatchString(name) {
				names = append(names, name)
			}
		}
	}
	return names
}

// removeTagged kills the processes in tag's namespaces, then deletes the
// namespaces, the links and the bridge.
func removeTagged(tag string) {
	var nss, links []string
	if out, err := runCmd(10*time.Second, "ip", "netns", "list"); err == nil {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], tag+"-") {
				nss = append(nss, f[0])
			}
		}
	}
	for _, ns := range nss {
		emptyNamespace(ns)
		_, _ = runCmd(10*time.Second, "ip", "netns", "del", ns)
	}
	for _, name := range taggedNames() {
		if strings.HasPrefix(name, tag+"-") {
			links = append(links, name)
		}
	}
	// Veths first, the bridge last.
	sort.Slice(links, func(i, j int) bool { return !strings.HasSuffix(links[i], "-br") && strings.HasSuffix(links[j], "-br") })
	for _, l := range links {
		_, _ = runCmd(10*time.Second, "ip", "link", "del", l)
	}
}

// emptyNamespace kills every process in ns and waits (at most 5 s) until
// none is left: a namespace with a process in it outlives its deletion.
func emptyNamespace(ns string) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := runCmd(10*time.Second, "ip", "netns", "pids", ns)
		if err != nil {
			return
		}
		pids := strings.Fields(out)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, s := range pids {
			if pid, err := strconv.Atoi(s); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pickSubnet picks 10.A.B (A in 200..249) that no route or address of the
// host covers or is covered by.
func pickSubnet() string {
	var used []netip.Prefix
	for _, args := range [][]string{{"ip", "-o", "-4", "route", "show", "table", "all"}, {"ip", "-o", "-4", "addr", "show"}} {
		out, _ := runCmd(10*time.Second, args...)
		for _, w := range strings.Fields(out) {
			if p, err := netip.ParsePrefix(w); err == nil {
				used = append(used, p.Masked())
			} else if a, err := netip.ParseAddr(w); err == nil && a.Is4() {
				used = append(used, netip.PrefixFrom(a, 32))
			}
		}
	}
	for range 1000 {
		s := fmt.Sprintf("10.%d.%d", 200+rand.IntN(50), rand.IntN(256))
		mine := netip.MustParsePrefix(s + ".0/24")
		clash := false
		for _, u := range used {
			if u.Bits() > 0 && u.Overlaps(mine) {
				clash = true
			}
		}
		if !clash {
			return s
		}
	}
	return "10.249.249"
}

// create makes the bridge, the namespaces and the veths.
func (tp *topo) create() error {
	host := []string{
		fmt.Sprintf("link add %s type bridge", tp.bridge),
		fmt.Sprintf("link set %s up", tp.bridge),
	}
	for _, n := range tp.nodes {
		host = append(host,
			"netns add "+n.ns,
			fmt.Sprintf("link add %s type veth peer name eth0 netns %s", n.ns, n.ns),
			fmt.Sprintf("link set %s master %s up", n.ns, tp.bridge))
	}
	if err := ipBatch("", host, false); err != nil {
		return err
	}
	return tp.each(tp.nodes, func(n *node) error {
		return ipBatch(n.ns, []string{
			"link set lo up",
			fmt.Sprintf("addr add %s/24 dev eth0", n.ip),
			"link set eth0 up",
		}, false)
	})
}

// each runs f for every node at once and returns the first error.
func (tp *topo) each(nodes []*node, f func(*node) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(n) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ipBatch runs ip commands, one a line, in ns ("": the host's); with force,
// it goes on past a failing one.
func ipBatch(ns string, cmds []string, force bool) error {
	args := []string{"ip"}
	if ns != "" {
		args = append(args, "-n", ns)
	}
	if force {
		args = append(args, "-force")
	}
	f, err := os.CreateTemp("", "bqn-batch-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(strings.Join(cmds, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	_, err = runCmd(20*time.Second, append(args, "-batch", f.Name())...)
	return err
}

// destroy is the topology's cleanup: processes, namespaces, veths, bridge.
func (tp *topo) destroy() {
	if tp.lock == nil {
		return
	}
	removeTagged(tp.tag)
	if left := tp.leftovers(); len(left) > 0 {
		tp.t.Errorf("topology %s: left behind after cleanup: %v", tp.tag, left)
	}
	unlockTag(tp.lock, tp.lockAt)
}

// leftovers lists what of the topology still exists.
func (tp *topo) leftovers() []string {
	var left []string
	for _, name := range taggedNames() {
		if strings.HasPrefix(name, tp.tag+"-") {
			left = append(left, name)
		}
	}
	return left
}

// node returns the node named name.
func (tp *topo) node(name string) *node {
	n := tp.byName[name]
	if n == nil {
		tp.t.Fatalf("no node %q in the topology", name)
	}
	return n
}

// Partition cuts every node of a from every node of b, both ways: each side's
// neighbour entry for the other side's address is pinned to a MAC nobody
// owns, so their packets vanish without an error or an ICMP message.
func (tp *topo) Partition(a, b []string) {
	tp.t.Helper()
	tp.set(a, b, true)
}

// Heal undoes the cuts between a and b: the pinned entries go, and ARP
// resolves the addresses again on the next packet.
func (tp *topo) Heal(a, b []string) {
	tp.t.Helper()
	tp.set(a, b, false)
}

// Isolate cuts name from every other node.
func (tp *topo) Isolate(name string) {
	tp.t.Helper()
	tp.Partition([]string{name}, tp.others(name))
}

// HealAll undoes every cut.
func (tp *topo) HealAll() {
	tp.t.Helper()
	var all []string
	for _, n := range tp.nodes {
		all = append(all, n.name)
	}
	tp.set(all, all, false)
}

// others is every node but the named ones.
func (tp *topo) others(names ...string) []string {
	var o []string
	for _, n := range tp.nodes {
		if !contains(names, n.name) {
			o = append(o, n.name)
		}
	}
	return o
}

// Cut says whether from's packets to to vanish.
func (tp *topo) Cut(from, to string) bool {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.cuts[[2]string{from, to}]
}

func (tp *topo) set(a, b []string, cut bool) {
	tp.t.Helper()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	cmds := map[string][]string{} // node → its ip commands
	for _, x := range a {
		for _, y := range b {
			if x == y {
				continue
			}
			for _, p := range [][2]string{{x, y}, {y, x}} {
				if tp.cuts[p] == cut {
					continue
				}
				to := tp.node(p[1])
				if cut {
					cmds[p[0]] = append(cmds[p[0]], fmt.Sprintf("neigh replace %s lladdr %s dev eth0 nud permanent", to.ip, partitionMAC))
				} else {
					cmds[p[0]] = append(cmds[p[0]], fmt.Sprintf("neigh del %s dev eth0", to.ip))
				}
				if cut {
					tp.cuts[p] = true
				} else {
					delete(tp.cuts, p)
				}
			}
		}
	}
	var nodes []*node
	for name := range cmds {
		nodes = append(nodes, tp.node(name))
	}
	err := tp.each(nodes, func(n *node) error { return ipBatch(n.ns, cmds[n.name], !cut) })
	if err != nil {
		tp.t.Fatalf("setting partitions: %v", err)
	}
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}
