package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/cmd/internal/cli"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server"
	"github.com/bq-lock/bq/wire"
)

type devOpts struct {
	dir       string
	servers   int
	portBase  int
	processes bool
	logs      cli.LogFlags
}

func devCmd(stdout, stderr io.Writer) *cobra.Command {
	var o devOpts
	cmd := &cobra.Command{
		Use:   "dev [--dir DIR] [--servers 4] [--processes]",
		Short: "Run a whole local cluster on loopback, for trying bq out",
		Long: `Run a local cluster of n servers (default 4, tolerating 1 faulty) on 127.0.0.1, take and release
one lock through the SDK as a self-check, and print how to use it. With --dir the cluster's keys and
data stay in DIR between runs (made there if it has none); without, in a new temporary directory.
The servers log to DIR/dev.log (warnings and errors also to the terminal); with --processes each
server is a 'bqserver run' process of its own, logging to DIR/server-<i>.log, with its pid in
DIR/server-<i>.pid, so that you can kill some and watch what the cluster does. Ctrl-C stops it all.`,
		Example: `  bqserver dev
  bqserver dev --processes --dir /tmp/bq-drill     # then: kill -9 $(cat /tmp/bq-drill/server-3.pid)`,
		Args: cli.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runDev(o, stdout, stderr) },
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "", "cluster directory (made if it has no cluster.yaml; default: a new temporary directory)")
	f.IntVar(&o.servers, "servers", 4, "number of servers when making a new cluster")
	f.IntVar(&o.portBase, "port-base", 7400, "first UDP port when making a new cluster")
	f.BoolVar(&o.processes, "processes", false, "run each server as a process of its own ('bqserver run'), to try faults")
	o.logs.Add(f, "info")
	return cmd
}

// devServer is one server of the dev cluster: in this process, or a child.
type devServer struct {
	id   int
	addr string
	srv  *server.Server // in-process
	cmd  *exec.Cmd      // --processes
	pid  string         // its pid file
	done <-chan struct{}
	err  error
}

func runDev(o devOpts, stdout, stderr io.Writer) error {
	if _, err := (&o.logs).Logger(io.Discard); err != nil {
		return err
	}
	if o.dir == "" {
		tmp, err := os.MkdirTemp("", "bq-dev-")
		if err != nil {
			return &cli.Exit{Code: 1, Msg: err.Error()}
		}
		o.dir = tmp
		// A cluster nobody asked to keep goes with dev: its keys, data and
		// logs (--dir keeps them between runs).
		defer func() {
			if err := os.RemoveAll(tmp); err != nil {
				fmt.Fprintf(stderr, "bqserver dev: could not remove %s: %v\n", tmp, err)
				return
			}
			fmt.Fprintf(stdout, "removed %s, the temporary cluster directory (--dir DIR keeps a cluster between runs)\n", tmp)
		}()
	}
	clusterFile := filepath.Join(o.dir, certs.ClusterFileName)
	if _, err := os.Stat(clusterFile); errors.Is(err, fs.ErrNotExist) {
		c, err := certs.Init(certs.InitOptions{Dir: o.dir, Servers: o.servers, F: -1, Host: "127.0.0.1", PortBase: o.portBase}, time.Now(), rand.Reader)
		if err != nil {
			return &cli.Exit{Code: 1, Msg: err.Error()}
		}
		fmt.Fprintf(stdout, "made a %d-server cluster (f=%d, quorum %d) in %s\n", c.N, c.F, c.Quorum, o.dir)
	}
	cluster, err := certs.LoadCluster(clusterFile)
	if err != nil {
		return &cli.Exit{Code: 1, Msg: err.Error()}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var servers []*devServer
	var logFile string
	if o.processes {
		servers, err = startProcesses(o, cluster)
	} else {
		logFile = filepath.Join(o.dir, "dev.log")
		servers, err = startInProcess(o, cluster, logFile, stderr)
	}
	// Stopping: in-process servers close; processes get SIGTERM.
	stopAll := func() error {
		var errs []error
		for _, s := range servers {
			errs = append(errs, s.stop())
		}
		return errors.Join(errs...)
	}
	if err != nil {
		_ = stopAll()
		return &cli.Exit{Code: 1, Msg: err.Error()}
	}
	var ca *certs.ClientCA
	identity := ""
	if cluster.Closed() {
		// A closed cluster (a dir made by a plain init): dev holds its client
		// CA key, so it enrolls its self-check and an identity for the
		// commands it suggests (docs/protocol.md change 23).
		if ca, err = certs.LoadClientCA(o.dir); err != nil {
			_ = stopAll()
			return &cli.Exit{Code: 1, Msg: "cluster " + clusterFile + " is closed and dev cannot enroll its self-check: " + err.Error()}
		}
		if identity, err = devIdentity(ca, o.dir, stdout); err != nil {
			_ = stopAll()
			return &cli.Exit{Code: 1, Msg: err.Error()}
		}
	}
	check, err := selfCheck(ctx, cluster, ca)
	if err != nil {
		_ = stopAll()
		return &cli.Exit{Code: 1, Msg: "self-check failed: " + err.Error() + logHint(o, logFile)}
	}
	printBanner(stdout, o, cluster, servers, clusterFile, logFile, identity, check)
	if o.processes {
		for _, s := range servers {
			go func() {
				select {
				case <-s.done:
					fmt.Fprintf(stdout, "server %d (pid %d) exited: %v\n", s.id, s.cmd.Process.Pid, exitText(s.err))
				case <-ctx.Done():
				}
			}()
		}
	}
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping the dev cluster")
	return closeWithin(stopAll, stopBudget, slog.New(slog.NewTextHandler(stderr, nil)))
}

// startInProcess runs every server in this process, logging to logFile and
// warnings and errors also to the terminal.
func startInProcess(o devOpts, cluster *certs.Cluster, logFile string, stderr io.Writer) ([]*devServer, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	toFile, err := o.logs.Logger(f)
	if err != nil {
		return nil, err
	}
	logger := slog.New(slog.NewMultiHandler(toFile.Handler(), slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	var out []*devServer
	for i := range cluster.N {
		s, err := server.Start(server.Config{Dir: o.dir, ID: i, Logger: logger})
		if err != nil {
			for _, d := range out {
				_ = d.stop()
			}
			return nil, fmt.Errorf("starting server %d: %w", i, err)
		}
		out = append(out, &devServer{id: i, addr: s.Addr(), srv: s})
	}
	return out, nil
}

// startProcesses runs every server as `bqserver run`, a child that dies with
// this process however it dies (on Linux), logging to DIR/server-<i>.log.
func startProcesses(o devOpts, cluster *certs.Cluster) ([]*devServer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var out []*devServer
	fail := func(err error) ([]*devServer, error) {
		for _, d := range out {
			_ = d.stop()
		}
		return nil, err
	}
	for i := range cluster.N {
		log, err := os.OpenFile(filepath.Join(o.dir, fmt.Sprintf("server-%d.log", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fail(err)
		}
		d := &devServer{id: i, addr: cluster.Servers[i].Address, pid: pidFile(o.dir, i)}
		d.cmd = exec.Command(exe, "run", "--dir", o.dir, "--id", fmt.Sprint(i), "--log-level", o.logs.Level, "--log-format", o.logs.Format)
		d.cmd.Stdout, d.cmd.Stderr = log, log
		d.done, err = cli.StartTiedToParent(d.cmd, syscall.SIGTERM, &d.err)
		_ = log.Close()
		if err != nil {
			return fail(fmt.Errorf("starting server %d: %w", i, err))
		}
		if err := os.WriteFile(d.pid, []byte(fmt.Sprintf("%d\n", d.cmd.Process.Pid)), 0o600); err != nil {
			return fail(err)
		}
		out = append(out, d)
	}
	return out, nil
}

func pidFile(dir string, i int) string { return filepath.Join(dir, fmt.Sprintf("server-%d.pid", i)) }

// stop closes an in-process server or sends SIGTERM to a child and waits.
func (d *devServer) stop() error {
	if d.srv != nil {
		return d.srv.Close()
	}
	defer os.Remove(d.pid)
	select {
	case <-d.done:
		return nil // exited already (killed in a drill): not our failure
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	<-d.done
	if d.err != nil {
		return fmt.Errorf("server %d: %w", d.id, d.err)
	}
	return nil
}

func exitText(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

func logHint(o devOpts, logFile string) string {
	if logFile != "" {
		return " (see " + logFile + ")"
	}
	return " (see " + filepath.Join(o.dir, "server-*.log") + ")"
}

// printBanner says what runs where and what to try, after everything else.
func printBanner(w io.Writer, o devOpts, cluster *certs.Cluster, servers []*devServer, clusterFile, logFile, identity, check string) {
	how := "in this process"
	if o.processes {
		how = fmt.Sprintf("as %d processes", cluster.N)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nbq dev cluster: %d servers on 127.0.0.1 %s, tolerates %d faulty, quorum %d\n", cluster.N, how, cluster.F, cluster.Quorum)
	for _, s := range servers {
		if s.cmd != nil {
			fmt.Fprintf(&b, "  s%d  %-21s pid %d  (log %s)\n", s.id, s.addr, s.cmd.Process.Pid, filepath.Join(o.dir, fmt.Sprintf("server-%d.log", s.id)))
		} else {
			fmt.Fprintf(&b, "  s%d  %s\n", s.id, s.addr)
		}
	}
	fmt.Fprintf(&b, "cluster file: %s\n", clusterFile)
	if logFile != "" {
		fmt.Fprintf(&b, "server logs:  %s (warnings and errors also in this terminal)\n", logFile)
	}
	fmt.Fprintf(&b, "%s\n", check)
	client, server, where := commandsFor()
	fmt.Fprintf(&b, `
try it (%s):
  export BQ_CLUSTER=%s
  %s lock demo -- sh -c 'echo "holding $BQ_LOCK_NAME with token $BQ_LOCK_TOKEN"'
  %s lock demo          # holds until Ctrl-C; run status in another shell:
  %s status demo
`, where, clusterFile, client, client, client)
	if identity != "" {
		// Closed: the commands above need the enrolled identity, first.
		s := b.String()
		at := strings.Index(s, "  export BQ_CLUSTER=")
		b.Reset()
		b.WriteString(s[:at])
		fmt.Fprintf(&b, "  export BQ_IDENTITY=%s   # enrolled by dev: the cluster is closed\n", identity)
		b.WriteString(s[at:])
	}
	if o.processes {
		last, next := cluster.N-1, cluster.N-2
		fmt.Fprintf(&b, `fault drill (f = %d):
  kill -9 $(cat %s)   # one server down: locks still work
  %s lock demo -- echo still works
  kill -9 $(cat %s)   # %d down: no quorum of %d
  %s lock demo --try; echo "exit $?"   # 5: cluster unavailable
  %s run --dir %s --id %d 2>> %s &   # restart one: it catches up from the others
                         # (dev does not stop a server you restarted: kill it yourself when done)
`, cluster.F, pidFile(o.dir, last), client, pidFile(o.dir, next), cluster.N-next, cluster.Quorum, client,
			server, o.dir, last, filepath.Join(o.dir, fmt.Sprintf("server-%d.log", last)))
	} else {
		fmt.Fprintf(&b, "to run the servers as separate processes (and kill some): %s dev --processes --dir %s\n", server, o.dir)
	}
	b.WriteString("press Ctrl-C (or send SIGTERM) to stop\n")
	_, _ = io.WriteString(w, b.String())
}

// selfCheck takes and releases one lock through the SDK, as a user would,
// and returns the line that says so.
// On a closed cluster ca enrolls its throwaway key for ten minutes.
func selfCheck(ctx context.Context, cluster *certs.Cluster, ca *certs.ClientCA) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	key, err := crypto.GenerateKey(cluster.Scheme, rand.Reader)
	if err != nil {
		return "", err
	}
	var admission *crypto.Signed
	if ca != nil {
		adm, _, err := ca.Enroll(certs.EnrollOptions{Name: "dev-self-check", Key: key.Public, Locks: []string{selfCheckLock}, Validity: 10 * time.Minute}, time.Now(), rand.Reader)
		if err != nil {
			return "", err
		}
		admission = &adm
	}
	start := time.Now()
	c, err := bq.Dial(ctx, bq.Config{Cluster: cluster, Identity: key, Admission: admission})
	if err != nil {
		return "", err
	}
	defer c.Close()
	h, err := c.Mutex(selfCheckLock).Lock(ctx)
	if err != nil {
		return "", err
	}
	took := time.Since(start)
	if err := h.Unlock(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("self-check: took lock %q (token %s) and released it, %v after connecting",
		selfCheckLock, h.Token(), took.Round(time.Millisecond)), nil
}

// selfCheckLock is the lock dev's self-check takes.
const selfCheckLock = "bq-dev-self-check"

// devIdentityFile is the identity dev enrolls in a closed cluster's dir
// for the commands it suggests.
const devIdentityFile = "dev.id"

// devIdentity returns DIR/dev.id, enrolling it as "dev" (every name, the
// default validity) the first time, or again when its certificate no
// longer admits it.
func devIdentity(ca *certs.ClientCA, dir string, stdout io.Writer) (string, error) {
	path := filepath.Join(dir, devIdentityFile)
	if id, err := certs.LoadIdentity(path); err == nil && id.Admission != nil {
		if b, err := wire.VerifyAdmission(ca.Cluster.ClientCA, ca.Cluster.ID(), *id.Admission); err == nil && b.ValidAt(time.Now()) == nil {
			return path, nil
		}
		return "", fmt.Errorf("%s holds no valid admission certificate for this cluster any more: remove it and run dev again to enroll a new one", path)
	}
	key, err := crypto.GenerateKey(ca.Cluster.Scheme, rand.Reader)
	if err != nil {
		return "", err
	}
	signed, _, err := ca.Enroll(certs.EnrollOptions{Name: "dev", Key: key.Public, Validity: certs.DefaultAdmissionValidity, Record: true}, time.Now(), rand.Reader)
	if err != nil {
		return "", fmt.Errorf("enrolling dev's identity: %w", err)
	}
	if err := certs.WriteIdentity(path, &certs.Identity{Key: key, Admission: &signed}); err != nil {
		return "", err
	}
	fmt.Fprintf(stdout, "the cluster is closed: enrolled %q and wrote its identity to %s\n", "dev", path)
	return path, nil
}

// commandsFor is how the hints dev prints should start bqclient and
// bqserver, and where to run them: as dev itself was started (issue 55: a
// built bqserver printed "go run ./cmd/..." hints). Under go run (a
// binary in go's build cache) the go run commands, from the repository
// root; else the built commands, by name where PATH finds these very
// files, else by their path.
func commandsFor() (client, server, where string) {
	exe, err := os.Executable()
	if err != nil || strings.Contains(filepath.ToSlash(exe), "/go-build") {
		return "go run ./cmd/bqclient", "go run ./cmd/bqserver", "from the repository root, in another shell"
	}
	named := func(path, name string) string {
		if found, err := exec.LookPath(name); err == nil && sameFile(found, path) {
			return name
		}
		return path
	}
	server = named(exe, "bqserver")
	client = "bqclient"
	if sib := filepath.Join(filepath.Dir(exe), "bqclient"); isFile(sib) {
		client = named(sib, "bqclient")
	}
	return client, server, "in another shell"
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}
