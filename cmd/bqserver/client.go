package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/cmd/internal/cli"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
)

// The operator's commands for the clients of a closed cluster
// (docs/protocol.md change 23). They need the cluster directory with the
// client CA key (DIR/ca/client-ca.key); none needs a restart of a server.

func clientCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "client",
		Short: "Enroll, list and revoke the clients of a closed cluster",
		Long: `A closed cluster (made by 'bqserver init' without --open) serves a client only with an admission
certificate of its client CA, kept in DIR/ca/client-ca.key: the operator's secret. These commands
need that directory; the servers need no restart.`,
	}
	cmd.AddCommand(clientAddCmd(stdout, stderr), clientListCmd(stdout), clientRenewCmd(stdout, stderr), clientRevokeCmd(stdout, stderr))
	return cli.Group(cmd)
}

func clientAddCmd(stdout, stderr io.Writer) *cobra.Command {
	var dir, out, pub string
	var locks []string
	var validFor, maxHold time.Duration
	cmd := &cobra.Command{
		Use:   "add NAME --dir DIR (--out FILE | --pub FILE) [--locks PATTERN]... [--max-hold DUR] [--valid-for DUR]",
		Short: "Enroll a client: certify its key for this cluster",
		Long: `Enroll a client named NAME. With --out, make a new key and write a ready identity file (key and
certificate, mode 0600) for 'bqclient --identity FILE'. With --pub, certify a key the client made
with 'bqclient keygen' (its KEY.pub file), so the private key never leaves the client's machine:
the certificate goes to standard output, and the client appends it to its identity file.

--locks limits the lock names the client may use (repeat it for several patterns): '*' matches any
run of characters but '/', '**' any run at all, '?' one character but '/'. Without --locks the
client may use every name.

--max-hold bounds how long the client may hold a lock: past it the servers refuse its lease and
its session is reset by certificate; the SDK gives the lock up a little before (bqclient exits 4).
Without it the servers' max_hold setting applies (none by default).`,
		Example: `  bqserver client add ci --dir /etc/bq --out ci.identity --locks 'ci/**'
  bqclient keygen --out worker.key        # on the worker: writes worker.key and worker.key.pub
  bqserver client add worker --dir /etc/bq --pub worker.key.pub >> worker.key`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if dir == "" {
				return cli.Usagef("--dir is required")
			}
			if (out == "") == (pub == "") {
				return cli.Usagef("give exactly one of --out FILE (a new identity) and --pub FILE (a key made with 'bqclient keygen')")
			}
			if maxHold < 0 {
				return cli.Usagef("--max-hold must be ≥ 0")
			}
			if maxHold > 0 && maxHold < minMaxHold {
				// The SDK refuses a Lock whose holding the max-hold would
				// end within its margin (docs/protocol.md change 24); below a
				// second a holding is mostly margin whatever the TTL.
				return cli.Usagef("--max-hold %v is too short: at least %v (a client gives a holding up ε·TTL + max-hold/20 before the max-hold, and must hold it for at least half of it)", maxHold, minMaxHold)
			}
			if err := certs.CheckClientName(name); err != nil {
				return cli.Usagef("%v", err)
			}
			for _, p := range locks {
				if err := wire.CheckLockPattern(p); err != nil {
					return cli.Usagef("--locks: %v", err)
				}
			}
			ca, err := certs.LoadClientCA(dir)
			if err != nil {
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			var key *crypto.PrivateKey
			var public *crypto.Parsed
			if out != "" {
				if _, err := os.Lstat(out); err == nil {
					return &cli.Exit{Code: 1, Msg: fmt.Sprintf("%s already exists; refusing to overwrite an identity", out)}
				}
				if key, err = crypto.GenerateKey(ca.Cluster.Scheme, rand.Reader); err != nil {
					return &cli.Exit{Code: 1, Msg: err.Error()}
				}
				public = key.Public
			} else if public, err = certs.LoadPublicKey(pub); err != nil {
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			signed, body, err := ca.Enroll(certs.EnrollOptions{Name: name, Key: public, Locks: locks, MaxHold: maxHold, Validity: validFor, Record: true}, time.Now(), rand.Reader)
			if err != nil {
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			if out != "" {
				if err := certs.WriteIdentity(out, &certs.Identity{Key: key, Admission: &signed}); err != nil {
					return &cli.Exit{Code: 1, Msg: err.Error()}
				}
				fmt.Fprintf(stdout, "enrolled %q (client id %s): may use %s%s; valid until %s\nwrote %s: use it with bqclient --identity %s\n",
					name, body.Client.Hex()[:16], body.Patterns(), holdNote(body), until(body), out, shellQuote(out))
				return nil
			}
			_, _ = stdout.Write(certs.EncodeAdmission(signed))
			fmt.Fprintf(stderr, "enrolled %q (client id %s): may use %s%s; valid until %s\nthe certificate went to standard output: append it to the client's identity file\n",
				name, body.Client.Hex()[:16], body.Patterns(), holdNote(body), until(body))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "cluster directory made by 'bqserver init', with its client CA key (required)")
	f.StringVar(&out, "out", "", "make a new key and write the identity file here")
	f.StringVar(&pub, "pub", "", "certify the public key in this file (KEY.pub from 'bqclient keygen')")
	f.StringArrayVar(&locks, "locks", nil, "a lock-name pattern the client may use (repeatable; default: every name)")
	f.DurationVar(&maxHold, "max-hold", 0, "the longest the client may hold a lock (default: the servers' max_hold setting)")
	f.DurationVar(&validFor, "valid-for", certs.DefaultAdmissionValidity, "how long the certificate is valid")
	return cmd
}

// minMaxHold is the shortest max-hold client add enrolls.
const minMaxHold = time.Second

// holdNote words a certificate's max-hold for the enrolment message.
func holdNote(b *wire.AdmissionBody) string {
	if b.MaxHoldMillis == 0 {
		return ""
	}
	return fmt.Sprintf(", holding a lock at most %v", time.Duration(b.MaxHoldMillis)*time.Millisecond)
}

func until(b *wire.AdmissionBody) string {
	return time.UnixMilli(b.NotAfter).UTC().Format(time.RFC3339)
}

func clientListCmd(stdout io.Writer) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "list --dir DIR",
		Short: "List the enrolled clients, their lock patterns, which client CA certified them, and whether they were revoked",
		Long: `List the clients enrolled in DIR: name, client id, lock patterns, max-hold, the end of the
certificate recorded for each, which client CA signed it, and its state. The client CA is "newest"
(the one in DIR/ca/client-ca.key), "older" (after 'bqserver ca rotate-clients': still admitted until
'bqserver ca retire-clients'; renew the client first) or "retired" (the servers refuse it: renew
the client).`,
		Args: cli.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if dir == "" {
				return cli.Usagef("--dir is required")
			}
			ca, err := certs.LoadClientCA(dir)
			if err != nil {
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			ens, err := ca.Enrollments()
			if err != nil {
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tCLIENT ID\tLOCKS\tMAX HOLD\tVALID UNTIL\tCLIENT CA\tSTATE")
			now := time.Now()
			for _, en := range ens {
				state := "enrolled"
				switch {
				case en.Revoked != nil:
					state = "revoked " + time.UnixMilli(en.Revoked.At).UTC().Format(time.RFC3339)
				case en.Admission.ValidAt(now) != nil:
					state = "expired: bqserver client renew " + en.Name
				default:
					if left := time.UnixMilli(en.Admission.NotAfter).Sub(now); left < renewAhead {
						state = fmt.Sprintf("enrolled, expires in %d days: bqserver client renew %s", int(left/(24*time.Hour)), en.Name)
					}
				}
				hold := "default"
				if ms := en.Admission.MaxHoldMillis; ms > 0 {
					hold = (time.Duration(ms) * time.Millisecond).String()
				}
				issuer := en.Issuer
				switch {
				case en.Revoked != nil:
				case issuer == certs.IssuerOlder:
					issuer += " (renew it, then retire-clients)"
				case issuer == certs.IssuerRetired:
					issuer += " (refused: renew it)"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", en.Name, en.Admission.Client.Hex()[:16], en.Admission.Patterns(), hold, until(en.Admission), issuer, state)
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "cluster directory made by 'bqserver init' (required)")
	return cmd
}

// renewAhead is how long before its end client list marks a certificate.
const renewAhead = 30 * 24 * time.Hour

func clientRenewCmd(stdout, stderr io.Writer) *cobra.Command {
	var dir, identity string
	var validFor time.Duration
	cmd := &cobra.Command{
		Use:   "renew NAME --dir DIR [--identity FILE] [--valid-for DUR]",
		Short: "Renew a client's admission certificate: same key, patterns and max-hold, a new end",
		Long: `Certify the key of the client enrolled as NAME again, with the lock patterns and max-hold it has,
valid for --valid-for from now, and record it in DIR/clients/NAME.cert. Nothing stops: the old
certificate stays valid until its own end, and the client uses the new one from its next
connection (bqclient reads its identity file at each run; an SDK program opens a new Client).

With --identity, the new certificate takes the old one's place in that identity file (rewritten
whole: its key and exactly one certificate, the new one); otherwise it goes to standard output, to
append to the client's identity file (where the last certificate in the file counts). A revoked
client is not renewed.`,
		Example: `  bqserver client renew ci --dir /etc/bq --identity ci.identity
  bqserver client renew worker --dir /etc/bq >> worker.key     # or send it to the worker`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return cli.Usagef("--dir is required")
			}
			if validFor <= 0 {
				return cli.Usagef("--valid-for must be > 0")
			}
			ca, err := certs.LoadClientCA(dir)
			if err != nil {
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			var id *certs.Identity
			if identity != "" {
				// Check the file first: a renewal for another key must not land in it.
				if id, err = certs.LoadIdentity(identity); err != nil {
					return &cli.Exit{Code: 1, Msg: err.Error()}
				}
			}
			if id != nil {
				en, err := ca.Enrollment(args[0])
				if err != nil {
					return &cli.Exit{Code: 1, Msg: err.Error()}
				}
				if wire.ClientID(id.Key.Public.ID) != en.Client {
					return &cli.Exit{Code: 1, Msg: fmt.Sprintf("%s holds the key of client %s, not of %q (%s): nothing renewed",
						identity, wire.ClientID(id.Key.Public.ID).Hex()[:16], args[0], en.Client.Hex()[:16])}
				}
			}
			signed, body, err := ca.Renew(args[0], validFor, time.Now(), rand.Reader)
			if err != nil {
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			if id != nil {
				id.Admission = &signed
				if err := certs.ReplaceIdentity(identity, id); err != nil {
					return &cli.Exit{Code: 1, Msg: err.Error()}
				}
				fmt.Fprintf(stdout, "renewed %q (client id %s): may use %s%s; valid until %s\nwrote it to %s\n",
					body.Name, body.Client.Hex()[:16], body.Patterns(), holdNote(body), until(body), identity)
				return nil
			}
			_, _ = stdout.Write(certs.EncodeAdmission(signed))
			fmt.Fprintf(stderr, "renewed %q (client id %s): may use %s%s; valid until %s\nthe certificate went to standard output: append it to the client's identity file\n",
				body.Name, body.Client.Hex()[:16], body.Patterns(), holdNote(body), until(body))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "cluster directory made by 'bqserver init', with its client CA key (required)")
	f.StringVar(&identity, "identity", "", "write the renewed certificate into this identity file (of the same client)")
	f.DurationVar(&validFor, "valid-for", certs.DefaultAdmissionValidity, "how long the new certificate is valid")
	return cmd
}

func clientRevokeCmd(stdout, stderr io.Writer) *cobra.Command {
	var dir string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "revoke NAME --dir DIR [--timeout DUR]",
		Short: "Revoke a client: no server serves it again, and it loses what it holds",
		Long: `Revoke the client enrolled as NAME: sign its revocation with the client CA, record it in
DIR/clients/NAME.revoked, and hand it to every running server, which keeps it for good and passes
it on. From then on no correct server admits the client; its sessions are no longer renewed and end
by the ordinary reset certificate within one lease TTL, so a 'bqclient lock' of it loses its lock
(exit 4). Run it again to resend the same revocation (say, after servers were down).
It succeeds once a quorum of servers acknowledged; exit 5 otherwise.`,
		Example: `  bqserver client revoke ci --dir /etc/bq`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return cli.Usagef("--dir is required")
			}
			ca, err := certs.LoadClientCA(dir)
			if err != nil {
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			signed, body, err := ca.Revoke(args[0], time.Now())
			if err != nil {
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			fmt.Fprintf(stdout, "revoked %q (client id %s), recorded in %s\n", body.Name, body.Client.Hex()[:16], dir)
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			acked, err := sendRevocation(ctx, dir, ca, signed)
			if err != nil {
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			c := ca.Cluster
			ids := make([]string, 0, len(acked))
			for _, id := range acked {
				ids = append(ids, id.String())
			}
			fmt.Fprintf(stdout, "acknowledged by %d of %d servers (%s)\n", len(acked), c.N, strings.Join(ids, " "))
			if len(acked) < c.Quorum {
				return &cli.Exit{Code: 5, Msg: fmt.Sprintf("only %d of %d servers acknowledged within %v (a quorum is %d): the revocation is recorded; run this again when the servers are up",
					len(acked), c.N, timeout, c.Quorum)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "cluster directory made by 'bqserver init', with its client CA key (required)")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the servers' acknowledgements")
	return cmd
}

// operatorPattern is the only lock name the operator's short-lived identity
// may use: it locks nothing, it only hands over revocations.
const operatorPattern = ".bq-operator"

// sendRevocation hands a revocation to every server of the cluster over an
// identity it enrolls for ten minutes, and returns the servers that
// acknowledged it before ctx ended (they persisted it first).
func sendRevocation(ctx context.Context, dir string, ca *certs.ClientCA, signed crypto.Signed) ([]wire.ServerID, error) {
	c := ca.Cluster
	key, err := crypto.GenerateKey(c.Scheme, rand.Reader)
	if err != nil {
		return nil, err
	}
	adm, _, err := ca.Enroll(certs.EnrollOptions{Name: "operator", Key: key.Public, Locks: []string{operatorPattern}, Validity: 10 * time.Minute}, time.Now(), rand.Reader)
	if err != nil {
		return nil, err
	}
	_, members, pool, err := c.Newest(dir)
	if err != nil {
		return nil, err
	}
	tr, err := transport.DialClient(transport.ClientConfig{
		Key: key, Admission: &adm, Cluster: c.ID(), Servers: members.Addresses(), CAPool: pool, IdentifyServer: members.ByCert,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	for _, s := range members.Servers {
		_ = tr.Send(wire.ServerPeer(s.ID), &wire.Message{Revoke: &wire.Revoke{Req: uint64(s.ID) + 1, Revocation: signed}})
	}
	acked := map[wire.ServerID]bool{}
	for len(acked) < len(members.Servers) {
		select {
		case <-ctx.Done():
			return sortedIDs(acked), nil
		case in, ok := <-tr.Inbound():
			if !ok {
				return sortedIDs(acked), nil
			}
			if in.Kind == transport.EventMessage && in.Msg.Ack != nil && in.Msg.Ack.Req == uint64(in.From.Server)+1 {
				acked[in.From.Server] = true
			}
		}
	}
	return sortedIDs(acked), nil
}

func sortedIDs(m map[wire.ServerID]bool) []wire.ServerID {
	out := make([]wire.ServerID, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
