package nemesis

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The command under the lock is this test binary, re-executed by bqclient
// with roleEnv=worker (TestMain). It runs in the client's namespace and
// works on the fenced resource on the host's filesystem (checker.go):
//
//  1. it connects to the harness's unix socket (a path on the host's
//     filesystem, reachable from every network namespace) and says who it
//     is: the harness records its death the moment the socket closes;
//  2. it appends "start", reads the counter, sleeps its hold, appends the
//     counter plus one and then "end";
//  3. on SIGTERM it stops at once (appending "end ... how=term" after any
//     write in progress), or with workerTerm=ignore it ignores SIGTERM and
//     goes on until its hold is over or SIGKILL ends it.
const (
	roleEnv      = "BQN_ROLE"
	workerClient = "BQN_CLIENT"
	workerHist   = "BQN_HISTORY"
	workerCount  = "BQN_COUNTER"
	workerSock   = "BQN_SOCK"
	workerHold   = "BQN_HOLD"
	workerTerm   = "BQN_TERM" // obey or ignore
)

// Exit codes of a worker that could not do its work.
const (
	workerBadEnv  = 40
	workerNoSock  = 41
	workerNoFiles = 42
)

func worker() int {
	client, token, term := os.Getenv(workerClient), os.Getenv("BQ_LOCK_TOKEN_INT"), os.Getenv(workerTerm)
	hold, err := time.ParseDuration(os.Getenv(workerHold))
	if client == "" || token == "" || err != nil || (term != "obey" && term != "ignore") {
		fmt.Fprintf(os.Stderr, "worker: bad environment (client %q, token %q, hold %q, term %q)\n", client, token, os.Getenv(workerHold), term)
		return workerBadEnv
	}
	var mu sync.Mutex // held by each write, and from the end record to the exit
	started := false
	if term == "ignore" {
		signal.Ignore(syscall.SIGTERM)
	} else {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM)
		go func() {
			<-sigs
			mu.Lock()
			if started {
				appendLine(os.Getenv(workerHist), FormatRecord("end", token, mono(), "client="+client, "how=term"))
			}
			os.Exit(128 + int(syscall.SIGTERM))
		}()
	}
	conn, err := net.Dial("unix", os.Getenv(workerSock))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return workerNoSock
	}
	if _, err := fmt.Fprintf(conn, "%s %s\n", client, token); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return workerNoSock
	}

	mu.Lock()
	shared := os.Getenv("BQ_LOCK_MODE") == "shared"
	attrs := []string{"client=" + client, "pid=" + strconv.Itoa(os.Getpid()), "term=" + term}
	if shared {
		attrs = append(attrs, "mode=shared")
	}
	if err := appendLine(os.Getenv(workerHist), FormatRecord("start", token, mono(), attrs...)); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return workerNoFiles
	}
	started = true
	v, err := lastValue(os.Getenv(workerCount))
	mu.Unlock()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return workerNoFiles
	}
	time.Sleep(hold)
	mu.Lock()
	if shared {
		// A reader reads only (change 60): it leaves the counter alone.
	} else if err := appendLine(os.Getenv(workerCount), fmt.Sprintf("%s %d", token, v+1)); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return workerNoFiles
	}
	if err := appendLine(os.Getenv(workerHist), FormatRecord("end", token, mono(), "client="+client, "how=done")); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return workerNoFiles
	}
	return 0 // mu stays held: no SIGTERM record after the end
}

// appendLine appends line and a newline in one write.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// lastValue is the counter log's last value (0 if empty).
func lastValue(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return 0, err
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return 0, nil
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, fmt.Errorf("counter: bad last line %q", b)
	}
	return strconv.Atoi(f[1])
}

// resource is the fenced shared resource of one test: the history, the
// counter log and the socket that tells the harness when a command died.
type resource struct {
	t       *testing.T
	dir     string
	hist    string
	counter string
	sock    string
	ln      net.Listener
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]bool
}

func newResource(t *testing.T) *resource {
	// A short directory: a unix socket's path has at most 107 bytes.
	dir, err := os.MkdirTemp("", "bqn-res-")
	if err != nil {
		t.Fatal(err)
	}
	r := &resource{t: t, dir: dir, hist: filepath.Join(dir, "history"), counter: filepath.Join(dir, "counter"), sock: filepath.Join(dir, "sock"), conns: map[net.Conn]bool{}}
	for _, p := range []string{r.hist, r.counter} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r.ln, err = net.Listen("unix", r.sock)
	if err != nil {
		t.Fatal(err)
	}
	go r.accept()
	t.Cleanup(func() {
		_ = r.ln.Close()
		// The commands are dead by now (their processes' cleanups ran
		// first), so every socket is closed; one that is not is given up.
		ended := make(chan struct{})
		go func() { r.wg.Wait(); close(ended) }()
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			r.mu.Lock()
			for c := range r.conns {
				_ = c.Close()
			}
			r.mu.Unlock()
			<-ended
		}
		if t.Failed() {
			t.Logf("--- history:\n%s", tail(readFile(r.hist), 16<<10))
		}
		if *keep != "" {
			r.keep()
		}
		_ = os.RemoveAll(dir)
	})
	return r
}

var keep = flag.String("nemesis.keep", "", "copy each test's history and counter log to this directory (TEST.history, TEST.counter), and the output of its servers and of each lock command that lost its lock (TEST.outputs)")

// keep copies the history and the counter log to -nemesis.keep.
func (r *resource) keep() {
	name := strings.ReplaceAll(r.t.Name(), "/", "_")
	for src, ext := range map[string]string{r.hist: ".history", r.counter: ".counter"} {
		err := os.MkdirAll(*keep, 0o755)
		if err == nil {
			err = os.WriteFile(filepath.Join(*keep, name+ext), []byte(readFile(src)), 0o644)
		}
		if err != nil {
			r.t.Errorf("-nemesis.keep: %v", err)
			return
		}
	}
	r.t.Logf("history and counter kept in %s", filepath.Join(*keep, name+".{history,counter}"))
}

func (r *resource) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.wg.Add(1)
		r.mu.Lock()
		r.conns[c] = true
		r.mu.Unlock()
		go func() {
			defer r.wg.Done()
			defer func() {
				r.mu.Lock()
				delete(r.conns, c)
				r.mu.Unlock()
				_ = c.Close()
			}()
			line, err := bufio.NewReader(c).ReadString('\n')
			f := strings.Fields(line)
			if err != nil || len(f) != 2 {
				return
			}
			_, _ = io.Copy(io.Discard, c) // until the command dies
			r.record("dead", f[1], "client="+f[0])
		}()
	}
}

// record appends a record of the harness to the history.
func (r *resource) record(kind, token string, attrs ...string) int64 {
	ns := mono()
	if err := appendLine(r.hist, FormatRecord(kind, token, ns, attrs...)); err != nil {
		r.t.Errorf("history: %v", err)
	}
	return ns
}

// note appends what the nemesis did to the history and the test's log.
func (r *resource) note(format string, args ...any) int64 {
	s := fmt.Sprintf(format, args...)
	return r.record("note", "", strings.Fields(s)...)
}

// env is a worker's environment.
// Under go test -race the worker is race-instrumented too, and such a
// binary sleeps a second at a clean exit (GORACE atexit_sleep_ms): not
// for the worker, whose death is what the scenarios time.
func (r *resource) env(client string, hold time.Duration, term string) []string {
	return []string{workerClient + "=" + client, workerHist + "=" + r.hist, workerCount + "=" + r.counter,
		workerSock + "=" + r.sock, workerHold + "=" + hold.String(), workerTerm + "=" + term,
		"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}
}

// check parses the history and the counter and runs the checker.
func (r *resource) check() Report {
	r.t.Helper()
	hist, err := ParseHistory(strings.NewReader(readFile(r.hist)))
	if err != nil {
		r.t.Fatal(err)
	}
	ws, err := ParseCounter(strings.NewReader(readFile(r.counter)))
	if err != nil {
		r.t.Fatal(err)
	}
	return Check(hist, ws)
}

// starts is the start records so far.
func (r *resource) starts() []Record {
	hist, err := ParseHistory(strings.NewReader(readFile(r.hist)))
	if err != nil {
		r.t.Fatal(err)
	}
	var s []Record
	for _, rec := range hist {
		if rec.Kind == "start" {
			s = append(s, rec)
		}
	}
	return s
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
