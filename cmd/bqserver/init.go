package main

import (
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
)

const initUsage = `usage: bqserver init --dir DIR --servers N [--f F] [--host H] [--port-base P] [--scheme S] [--name NAME]

Makes a new cluster in DIR: a cluster CA, the public cluster file DIR/cluster.yaml,
and each server's private keys in DIR/server-<i>/. Server i listens on H:P+i.
It never overwrites an existing cluster.

`

// runInit implements "bqserver init". It returns the exit code: 0 ok,
// 1 error, 2 usage.
func runInit(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bqserver init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, initUsage)
		fs.PrintDefaults()
	}
	var opts certs.InitOptions
	fs.StringVar(&opts.Dir, "dir", "", "directory to create the cluster in (required)")
	fs.IntVar(&opts.Servers, "servers", 0, "number of servers n (required)")
	fs.IntVar(&opts.F, "f", 0, "Byzantine servers tolerated (default ⌊(n-1)/3⌋, the most n servers tolerate)")
	fs.StringVar(&opts.Host, "host", certs.DefaultHost, "host of the servers' addresses, or a comma-separated list with one host per server")
	fs.IntVar(&opts.PortBase, "port-base", certs.DefaultPortBase, "port of server 0; server i uses port-base+i")
	fs.StringVar(&opts.Scheme, "scheme", crypto.DefaultScheme, "signature scheme: "+strings.Join(crypto.Schemes(), ", "))
	fs.StringVar(&opts.Name, "name", certs.DefaultName, "cluster name")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "bqserver init: "+format+"\n", a...)
		fmt.Fprintln(stderr, `run "bqserver init -h" for usage`)
		return 2
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["dir"] || opts.Dir == "" {
		return usage("--dir is required")
	}
	if !set["servers"] {
		return usage("--servers is required")
	}
	if !set["f"] {
		opts.F = -1 // the most the servers tolerate
	} else if opts.F < 0 {
		return usage("--f %d: the number of Byzantine servers tolerated cannot be negative", opts.F)
	}
	for _, name := range []string{"host", "scheme", "name"} {
		if set[name] && fs.Lookup(name).Value.String() == "" {
			return usage("--%s must not be empty", name)
		}
	}
	if set["port-base"] && opts.PortBase == 0 {
		return usage("--port-base 0 is not a port (1..65535)")
	}

	c, err := certs.Init(opts, time.Now(), rand.Reader)
	if err != nil {
		if errors.Is(err, certs.ErrBadOptions) {
			for _, line := range strings.Split(err.Error(), "\n") {
				fmt.Fprintf(stderr, "bqserver init: %s\n", strings.TrimPrefix(line, certs.ErrBadOptions.Error()+": "))
			}
			fmt.Fprintln(stderr, `run "bqserver init -h" for usage`)
			return 2
		}
		fmt.Fprintf(stderr, "bqserver init: %v\n", err)
		return 1
	}
	printInit(stdout, opts.Dir, c)
	return 0
}

func printInit(w io.Writer, dir string, c *certs.Cluster) {
	servers := "servers"
	if c.F == 1 {
		servers = "server"
	}
	fmt.Fprintf(w, "Created cluster %q in %s: %d servers, quorum %d, tolerates f=%d Byzantine %s, %s signatures.\n\n",
		c.Name, dir, c.N, c.Quorum, c.F, servers, c.Scheme)
	type row struct{ path, what string }
	rows := []row{{filepath.Join(dir, certs.ClusterFileName), "public: give a copy to every server and client"}}
	for _, s := range c.Servers {
		rows = append(rows, row{certs.ServerDir(dir, int(s.ID)) + string(filepath.Separator),
			fmt.Sprintf("private keys of server %d (%s): copy only to that server's machine", s.ID, s.Address)})
	}
	rows = append(rows, row{filepath.Join(dir, certs.CADirName, certs.CAKeyFile),
		"cluster CA private key: only needed to add servers; keep it offline"})
	width := 0
	for _, r := range rows {
		width = max(width, len(r.path))
	}
	for _, r := range rows {
		fmt.Fprintf(w, "  %-*s  %s\n", width, r.path, r.what)
	}
	fmt.Fprintf(w, "\nStart each server on its machine (it needs %s and its own server-<id>/ directory):\n", certs.ClusterFileName)
	for _, s := range c.Servers {
		fmt.Fprintf(w, "  bqserver run --dir %s --id %d\n", shellQuote(dir), s.ID)
	}
	fmt.Fprintf(w, "\nEvery operation needs answers from a quorum of %d servers; the cluster stays safe and live with up to %d faulty %s.\n",
		c.Quorum, c.F, servers)
}

// shellQuote quotes s for a POSIX shell when it holds anything but plain characters.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@+=,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
