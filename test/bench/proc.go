package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bq-lock/bq/internal/testutil"
)

// child is a process the bench started; its output goes to a log file.
type child struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

var (
	childrenMu sync.Mutex
	children   []*child
)

// startChild starts args[0] with its output in logPath. The child gets
// SIGKILL if the bench dies (Pdeathsig), and stopAll ends it otherwise. It
// leads a process group of its own, and stop kills the group: what the
// child started goes with it. (Wait returns at once once it is killed: the
// log is a file, not a pipe a grandchild could hold; WaitDelay bounds it
// should that change.)
func startChild(name, logPath string, args ...string) (*child, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	c := &child{name: name, logPath: logPath, done: make(chan struct{})}
	c.cmd = exec.Command(args[0], args[1:]...)
	c.cmd.Stdout, c.cmd.Stderr = f, f
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	c.cmd.WaitDelay = 5 * time.Second
	if err := c.cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	childrenMu.Lock()
	children = append(children, c)
	childrenMu.Unlock()
	go func() {
		c.err = c.cmd.Wait()
		_ = f.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) output() string {
	b, _ := os.ReadFile(c.logPath)
	return string(b)
}

// tail is the end of the child's log, for error messages.
func (c *child) tail() string {
	out := c.output()
	if len(out) > 2000 {
		out = "..." + out[len(out)-2000:]
	}
	return out
}

// waitLog waits until the child's log holds sub at least n times.
func (c *child) waitLog(sub string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if strings.Count(c.output(), sub) >= n {
			return nil
		}
		select {
		case <-c.done:
			return fmt.Errorf("%s exited (%v) before logging %q:\n%s", c.name, c.err, sub, c.tail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not log %q within %v:\n%s", c.name, sub, timeout, c.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM, and SIGKILL to the child's process group after grace.
func (c *child) stop(grace time.Duration) {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		c.killGroup()
		<-c.done
	}
}

// killGroup sends SIGKILL to the child and its process group. Signal goes
// to the child itself (a pidfd, never a reused pid): nil means it is not
// reaped yet, so its pid is still its group's id and no other's.
func (c *child) killGroup() {
	if c.cmd.Process.Signal(syscall.Signal(0)) == nil {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	}
	_ = c.cmd.Process.Kill()
}

// stopAll stops every child still running, all at once.
func stopAll(grace time.Duration) {
	childrenMu.Lock()
	cs := children
	children = nil
	childrenMu.Unlock()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { c.stop(grace) })
	}
	wg.Wait()
}

// freeUDPBase finds n consecutive free UDP ports on loopback (QUIC).
func freeUDPBase(n int) (int, error) { return testutil.FreeUDPPortBase(n) }

// freeTCPPorts finds n free TCP ports on loopback.
func freeTCPPorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// clkTck is the unit of utime and stime in /proc/PID/stat.
var clkTck = func() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && v > 0 {
			return float64(v)
		}
	}
	return 100
}()

// cpuSeconds is utime+stime of pid (0: this process), in seconds.
func cpuSeconds(pid int) (float64, error) {
	path := "/proc/self/stat"
	if pid != 0 {
		path = filepath.Join("/proc", strconv.Itoa(pid), "stat")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces and parentheses: fields start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: no ')'", path)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: %d fields", path, len(f))
	}
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%s: bad utime/stime", path)
	}
	return (ut + st) / clkTck, nil
}

// cpuSum is the CPU seconds of every pid.
func cpuSum(pids []int) (float64, error) {
	var sum float64
	for _, p := range pids {
		v, err := cpuSeconds(p)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// metricLine is "name{labels} value" in the Prometheus text format.
var metricLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)

// withoutServer drops the per-server label from "{a="x",server="s0"}", so
// that the servers' series sum up; the other labels keep their order.
func withoutServer(labels string) string {
	if labels == "" {
		return ""
	}
	var kept []string
	for _, l := range strings.Split(strings.Trim(labels, "{}"), ",") {
		if !strings.HasPrefix(l, `server="`) {
			kept = append(kept, l)
		}
	}
	if len(kept) == 0 {
		return ""
	}
	return "{" + strings.Join(kept, ",") + "}"
}

// scrape reads every URL's metrics and sums equal series over them.
func scrape(urls []string) (map[string]float64, error) {
	sum := make(map[string]float64)
	client := &http.Client{Timeout: 5 * time.Second}
	for _, u := range urls {
		resp, err := client.Get(u)
		if err != nil {
			return nil, err
		}
		if err := parseMetrics(resp.Body, sum); err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("%s: %w", u, err)
		}
		resp.Body.Close()
	}
	return sum, nil
}

func parseMetrics(r io.Reader, into map[string]float64) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := metricLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		into[m[1]+withoutServer(m[2])] += v
	}
	return sc.Err()
}

// delta is after - before for every series of after.
func delta(before, after map[string]float64) map[string]float64 {
	d := make(map[string]float64, len(after))
	for k, v := range after {
		d[k] = v - before[k]
	}
	return d
}
