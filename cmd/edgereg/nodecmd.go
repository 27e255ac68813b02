package main

import (
	"encoding"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lmittmann/tint"
	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wasm"
	"github.com/edgereg/edgereg/wire/pki"
)

type nodeFlags struct {
	cfg         node.Config
	configFile  string
	logFormat   string
	logLevel    string
	printConfig bool
	shutdown    time.Duration
}

func newNodeCmd(g *globals) *cobra.Command {
	nf := &nodeFlags{}
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run a registry node",
		Long: `Run a registry node. With no flags it listens on UDP 127.0.0.1:9876, serves
health and metrics on http://127.0.0.1:9877, keeps its data in ./edgereg-data and
creates a local CA there, so the CLI on this machine works with no configuration.
SIGINT, SIGTERM or SIGHUP stops it gracefully (SIGHUP is no reload: credentials
and --policy-dir are re-read when they change); a second one stops it at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nf.configFile != "" {
				if err := applyConfigFile(cmd.Flags(), nf.configFile); err != nil {
					return usageError{err}
				}
			}
			if err := refuseZeroSettings(cmd.Flags()); err != nil {
				return usageError{fmt.Errorf("invalid configuration: %w", err)}
			}
			nf.cfg.DataDir = g.data
			if err := runNode(cmd, g, nf); err != nil {
				var ue usageError
				if errors.As(err, &ue) {
					return err
				}
				return nodeFailure{err}
			}
			return nil
		},
	}
	addNodeFlags(cmd.Flags(), nf)
	return cmd
}

func addNodeFlags(fs *pflag.FlagSet, nf *nodeFlags) {
	c := &nf.cfg
	fs.StringVar(&c.Addr, "addr", node.DefaultAddr, "UDP address to serve QUIC on")
	fs.StringVar(&c.AdminAddr, "admin-addr", node.DefaultAdminAddr, `HTTP address for /healthz, /readyz and /metrics; "off" disables`)
	fs.StringVar(&c.CertFile, "tls-cert", "", "node certificate (PEM) instead of the local CA's")
	fs.StringVar(&c.KeyFile, "tls-key", "", "node key (PEM), with --tls-cert")
	fs.StringVar(&c.ClientCAFile, "tls-client-ca", "", "CA that signs client certificates (PEM), with --tls-cert")
	fs.StringVar(&c.RevocationFile, "revocations", "", "revoked client certificates: X.509 CRLs of the client CAs (PEM or DER), or leaf serials, hex, one per line")
	fs.StringSliceVar(&c.Hosts, "host", nil, "extra DNS names or IPs for the local CA to put in the node certificate")
	fs.StringVar(&c.TLSKeyExchange, "tls-key-exchange", string(pki.KeyExchangeHybrid), "TLS key exchange: hybrid (post-quantum X25519MLKEM768 when offered) or x25519 (X25519 alone: less CPU per handshake, no post-quantum protection)")
	fs.BoolVar(&c.AllowAnonymousClients, "allow-anonymous-clients", false, "let peers without a certificate read routes (never the default)")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve Go's profiler under /debug/pprof/ on the admin address")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", node.DefaultHeartbeatInterval, "brokers' heartbeat period")
	fs.DurationVar(&c.WarmUp, "warm-up", 0, "after start, route misses answer warming-up for this long (default: the heartbeat interval; negative disables)")
	fs.DurationVar(&c.ExpiryThreshold, "expiry-threshold", node.DefaultExpiryThreshold, "how long a broker may stay silent before it expires")
	fs.DurationVar(&c.ScanInterval, "scan-interval", node.DefaultScanInterval, "how often expired brokers are looked for")
	fs.IntVar(&c.MaxConns, "max-conns", node.DefaultMaxConns, "connections in total (readers may hold at most 90 %)")
	fs.IntVar(&c.MaxConnsPerHost, "max-conns-per-host", node.DefaultMaxConnsPerHost, "reader (client, node, anonymous) connections per source IP")
	fs.IntVar(&c.MaxStreamsPerConn, "max-streams-per-conn", node.DefaultMaxStreamsPerConn, "concurrent streams per connection")
	fs.IntVar(&c.MaxRequestLen, "max-request-size", 1<<20, "largest frame a client may send, bytes")
	fs.IntVar(&c.MaxBrokerFrameLen, "max-broker-frame-size", 16<<20, "largest frame a broker or operator may send, bytes")
	fs.IntVar(&c.Workers, "workers", 0, "requests handled at once (default 8 per CPU)")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", node.DefaultReadTimeout, "how long a started frame may take to arrive")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", node.DefaultIdleTimeout, "a stream that sends nothing for this long is closed")
	fs.IntVar(&c.MaxWatchesPerConn, "max-watches-per-conn", node.DefaultMaxWatchesPerConn, "topics one connection may watch")
	fs.IntVar(&c.MaxWatches, "max-watches", node.DefaultMaxWatches, "topics all connections together may watch; the readers of one source IP a quarter of it")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", node.DefaultWriteTimeout, "a frame the node writes must be taken by the peer within this, or its stream is reset")
	fs.IntVar(&c.MaxBytesInFlight, "max-bytes-in-flight", node.DefaultMaxBytesInFlight, "bytes of request frames being received at once, node-wide, per class (readers; brokers and operators)")
	fs.IntVar(&c.UDPReceiveBuffer, "udp-receive-buffer", node.DefaultUDPReceiveBuffer, "bytes of UDP receive buffer asked for the node's socket (forced past net.core.rmem_max with CAP_NET_ADMIN), where a connection storm's packets wait")
	fs.StringVar(&c.PolicyDir, "policy-dir", "", "directory of policy modules (route.wasm, expiry.wasm, confirm.wasm) loaded at start and on change")
	fs.DurationVar(&c.PolicyCallTimeout, "policy-call-timeout", 20*time.Millisecond, "how long one policy call may take before the built-in behaviour answers")
	fs.IntVar(&c.MaxPolicyUploadsPerMinute, "max-policy-uploads-per-minute", node.DefaultMaxPolicyUploadsPerMinute, "policy pushes and tests a node accepts per minute")
	fs.DurationVar(&c.PolicyReadBudget, "policy-read-budget", wasm.DefaultReadBudget, "route policy time one get-routes request may spend; later topics get --policy-route-failure")
	c.PolicyRouteFailure, c.PolicyConfirmFailure = wasm.FailOpen, wasm.FailClosed
	fs.Var(failModeFlag{&c.PolicyRouteFailure}, "policy-route-failure", "when the route policy cannot answer: open (unfiltered route) or closed (status policy-failed)")
	fs.Var(failModeFlag{&c.PolicyConfirmFailure}, "policy-confirm-failure", "when the confirm policy cannot answer: closed (hold due leases back) or open (remove them all)")
	fs.StringVar(&c.RemotingAddr, "remoting-addr", "", `TCP address for RocketMQ remoting (brokers' and clients' namesrvAddr), e.g. ":9876" (an empty host is loopback); "off" (the default) disables`)
	fs.BoolVar(&c.RemotingAllowBrokers, "remoting-allow-brokers", false, "accept broker registration over remoting (unauthenticated: anyone who reaches the port can register or remove brokers)")
	fs.BoolVar(&c.RemotingAllowAdmin, "remoting-allow-admin", false, "accept remoting's write and admin codes: KV put/delete, write permission, topic deletion (unauthenticated)")
	fs.VarPF(invertedBool{&c.RemotingKeepBrokersOnClose}, "remoting-unregister-on-close", "",
		"unregister a remoting broker when the TCP connection it registered on closes, as a NameServer does").NoOptDefVal = "true"
	fs.IntVar(&c.RemotingMaxFrame, "remoting-max-frame-size", 16<<20, "largest remoting frame, bytes (RocketMQ's default 16 MiB)")
	// Admission, lease bounds and the status page (issue 10, items 4, 9, 11).
	fs.StringVar(&c.StatusAddr, "status-addr", "", `HTTP address for the status page and /status.json (default: on the admin address when that is loopback, else off); "off" disables`)
	fs.IntVar(&c.MaxConnsPerIdentity, "max-conns-per-identity", node.DefaultMaxConnsPerIdentity, "connections per reader certificate; at the limit its oldest is replaced")
	fs.IntVar(&c.MaxBrokerConnsPerHost, "max-broker-conns-per-host", node.DefaultMaxBrokerConnsPerHost, "broker and operator connections per source IP, apart from readers'")
	fs.IntVar(&c.MaxBrokerConnsPerIdentity, "max-broker-conns-per-identity", node.DefaultMaxBrokerConnsPerIdentity, "connections per broker or operator certificate over every source IP; at the limit its oldest without a live session is replaced, else the newest refused")
	fs.IntVar(&c.MaxHandshakesPerHost, "max-handshakes-per-host", node.DefaultMaxHandshakesPerHost, "handshakes in progress per source IP")
	fs.IntVar(&c.MaxHandshakes, "max-handshakes", 0, "TLS handshakes worked on at once, node-wide; more wait their turn (default 256 per CPU)")
	fs.DurationVar(&c.HandshakeQueueTimeout, "handshake-queue-timeout", node.DefaultHandshakeQueueTimeout, "how long a handshake may wait for one of --max-handshakes before it fails")
	fs.IntVar(&c.BrokerWorkers, "broker-workers", 0, "requests of brokers and operators handled at once, apart from --workers (default a quarter of it, at least 2)")
	fs.DurationVar(&c.MinLeaseTimeout, "min-lease-timeout", registry.DefaultMinThreshold, "shortest heartbeat timeout a broker may ask for")
	fs.DurationVar(&c.MaxLeaseTimeout, "max-lease-timeout", registry.DefaultMaxThreshold, "longest heartbeat timeout a broker may ask for")
	fs.StringVar(&nf.logFormat, "log-format", "auto", "log format: auto (colored text on a terminal, JSON otherwise), text or json")
	fs.StringVar(&nf.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&nf.configFile, "config", "", "YAML config file of flag-name: value (flags and EDGEREG_* variables win)")
	fs.BoolVar(&nf.printConfig, "print-config", false, "print the effective configuration and exit")
	fs.DurationVar(&nf.shutdown, "shutdown-timeout", node.DefaultShutdownTimeout, "how long a graceful stop waits for requests in progress (a second signal ends the wait)")
}

// refuseZeroSettings refuses a count or duration set to zero, or a string
// set empty (on the command line, by a variable or in the config file),
// where the flag's default is not: node.Config reads zero and "" as "the
// default", so the node would quietly run with the default while
// --print-config showed 0 (or nothing). Zero
// stays valid where it is the flag's own default (--workers, --warm-up:
// chosen by the node). A negative count is refused too: node.Config reads a negative
// --workers or --broker-workers as the default as well. (A negative
// duration is Validate's to refuse; --warm-up takes one to disable it.)
func refuseZeroSettings(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if _, client := clientSettings[f.Name]; err != nil || !f.Changed || client {
			return // a client setting (EDGEREG_TIMEOUT=) is not the node's to refuse
		}
		t, v := f.Value.Type(), f.Value.String()
		switch {
		case (t == "int" || t == "int64") && strings.HasPrefix(v, "-"):
			err = fmt.Errorf("--%s may not be negative, got %s (%s)", f.Name, v, flagSource(f))
		case (t == "int" || t == "int64" || t == "duration") && (v == "0" || v == "0s") && v != f.DefValue:
			err = fmt.Errorf("--%s must be positive, got %s (%s)", f.Name, v, flagSource(f))
		case t == "string" && v == "" && f.DefValue != "":
			err = fmt.Errorf("--%s may not be empty (%s); its default is %s", f.Name, flagSource(f), f.DefValue)
		}
	})
	return err
}

// refuseAgentSettings is refuseZeroSettings for the broker agent and the
// gateway, which also read a negative duration as unset: each is refused,
// naming the flag, where the agent would run with its default without a word.
func refuseAgentSettings(fs *pflag.FlagSet) error {
	if err := refuseZeroSettings(fs); err != nil {
		return err
	}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err == nil && f.Changed && f.Value.Type() == "duration" && strings.HasPrefix(f.Value.String(), "-") {
			err = fmt.Errorf("--%s may not be negative, got %s (%s)", f.Name, f.Value, flagSource(f))
		}
	})
	return err
}

// nodeFailure is a failure of the node itself (a port in use, a data
// directory it cannot use, a stop past --shutdown-timeout): exit 1, never
// a client's exit code such as 4, which a deadline's error would get.
type nodeFailure struct{ error }

func (f nodeFailure) Unwrap() error { return f.error }

func runNode(cmd *cobra.Command, g *globals, nf *nodeFlags) error {
	logger, err := newLogger(os.Stderr, nf.logFormat, nf.logLevel, cmd.Flags())
	if err != nil {
		return usageError{err}
	}
	nf.cfg.Logger = logger
	applyContainerMemoryLimit(logger)
	cfg := nf.cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return usageError{fmt.Errorf("invalid configuration: %w", err)}
	}
	if nf.printConfig {
		entries := effectiveConfig(cmd, cfg)
		return g.emit(cmd.OutOrStdout(), entries, func(tw *tabwriter.Writer) { printConfigTable(tw, entries) })
	}
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	logEndpoints(logger, n, cfg)
	ctx, now, release := stopOnSignals(cmd.Context())
	defer release()
	served := make(chan error, 1)
	go func() { served <- n.Serve() }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	if err := stopGracefully(now, nf.shutdown, logger, n.Shutdown); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, node.ErrClosed) {
		return err
	}
	return nil
}

// logEndpoints logs, once at start, where the node serves HTTP and where
// the local CA and the CLI's operator credential are, so a first run (`make
// run`) says what the README's Set-up says, and a port chosen by the system
// (--admin-addr 127.0.0.1:0) can be found.
func logEndpoints(logger *slog.Logger, n *node.Node, cfg node.Config) {
	var attrs []any
	if a := n.AdminAddr(); a != nil {
		base := "http://" + a.String()
		attrs = append(attrs, "health", base+"/healthz", "ready", base+"/readyz", "metrics", base+"/metrics")
	}
	if s := n.StatusAddr(); s != nil {
		attrs = append(attrs, "status", "http://"+s.String()+"/")
	}
	if cfg.CertFile == "" {
		attrs = append(attrs, "tls", pki.TLSDir(cfg.DataDir))
	}
	if len(attrs) > 0 {
		logger.Info("node endpoints", attrs...)
	}
}

// newLogger builds the node's logger: colored text on a terminal, JSON when
// stderr is not one (or when asked). fs, when not nil, holds the
// --log-format and --log-level flags, so an error names where a bad value
// came from (EDGEREG_LOG_LEVEL, a config file's line), as other settings'
// errors do.
func newLogger(w *os.File, format, level string, fs *pflag.FlagSet) (*slog.Logger, error) {
	from := func(name string) string {
		if fs == nil || fs.Lookup(name) == nil {
			return ""
		}
		return " (" + flagSource(fs.Lookup(name)) + ")"
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q%s: use debug, info, warn or error", level, from("log-level"))
	}
	switch format {
	case "auto":
		if isatty.IsTerminal(w.Fd()) {
			format = "text"
		} else {
			format = "json"
		}
	case "text", "json":
	default:
		return nil, fmt.Errorf("--log-format %q%s: use auto, text or json", format, from("log-format"))
	}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv})), nil
	}
	return slog.New(textHandler(w, lv, isatty.IsTerminal(w.Fd()))), nil
}

// textHandler is the text log handler, colored on a terminal.
func textHandler(w io.Writer, lv slog.Level, color bool) slog.Handler {
	return tint.NewTextHandler(w, &tint.Options{Level: lv, TimeFormat: time.TimeOnly, NoColor: !color, ReplaceAttr: escapeForTerminal})
}

// escapeForTerminal keeps peers' strings (broker, cluster and certificate
// names, KV keys, errors quoting them) from reaching a terminal as control
// sequences. tint quotes a value, then, when colored, turns every `\x1b` of
// the quoted text back into a raw ESC: a real ESC in a KV key, and a
// literal backslash-x1b in a broker name (printable, so valid), both became
// terminal controls; without color it cuts what looks like a sequence out,
// so the audit line named another key. A value whose quoted form holds
// `\x1b` is handed to tint as bytes, which it quotes exactly and leaves
// alone. Other values are untouched.
func escapeForTerminal(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey || a.Key == slog.SourceKey) {
		return a
	}
	var s string
	switch a.Value.Kind() {
	case slog.KindString:
		s = a.Value.String()
	case slog.KindAny:
		switch v := a.Value.Any().(type) {
		case []byte, encoding.TextMarshaler, slog.Level:
			return a
		default:
			s = fmt.Sprintf("%+v", v) // as tint prints it
		}
	default:
		return a
	}
	if !strings.Contains(s, `\x1b`) && !strings.ContainsRune(s, 0x1b) {
		return a
	}
	return slog.Any(a.Key, []byte(s))
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// configEntry is one setting as --print-config shows it: the value the
// node will use (defaults resolved: the warm-up window, the worker count)
// and where it came from: "default", "flag --NAME", the EDGEREG_*
// variable, or "FILE:LINE" of the config file.
type configEntry struct {
	Setting  string `json:"setting"`
	Value    string `json:"value"`
	Source   string `json:"source"`
	Variable string `json:"variable"`
}

// effectiveConfig lists the node's settings: its own flags and --data.
func effectiveConfig(cmd *cobra.Command, cfg node.Config) []configEntry {
	resolved := map[string]string{
		"warm-up":        cfg.WarmUp.String(),
		"workers":        strconv.Itoa(cfg.Workers),
		"max-handshakes": strconv.Itoa(cfg.MaxHandshakes),
		"broker-workers": strconv.Itoa(cfg.BrokerWorkers),
		"data":           cfg.DataDir,
		"status-addr":    cfg.EffectiveStatusAddr(),
		"remoting-addr":  cfg.EffectiveRemotingAddr(),
	}
	if cfg.WarmUp < 0 {
		resolved["warm-up"] = "disabled"
	}
	var out []configEntry
	add := func(f *pflag.Flag) {
		if f.Name == "help" || f.Name == "print-config" {
			return
		}
		v, ok := resolved[f.Name]
		if !ok {
			v = f.Value.String()
			if sv, isSlice := f.Value.(pflag.SliceValue); isSlice {
				v = strings.Join(sv.GetSlice(), ",")
			}
		}
		out = append(out, configEntry{Setting: f.Name, Value: v, Source: flagSource(f), Variable: EnvName(f.Name)})
	}
	cmd.LocalNonPersistentFlags().VisitAll(add)
	if f := cmd.Flags().Lookup("data"); f != nil {
		add(f)
	}
	slices.SortFunc(out, func(a, b configEntry) int { return strings.Compare(a.Setting, b.Setting) })
	return out
}

func printConfigTable(tw *tabwriter.Writer, entries []configEntry) {
	fmt.Fprintln(tw, "SETTING\tVALUE\tSOURCE")
	for _, e := range entries {
		tablef(tw, "%s\t%s\t%s\n", e.Setting, e.Value, e.Source)
	}
}

// invertedBool is a bool flag that sets the negation of a config field, so
// a field whose zero value is the default can have a flag that defaults to
// true.
type invertedBool struct{ v *bool }

func (b invertedBool) String() string {
	if b.v == nil {
		return "true"
	}
	return strconv.FormatBool(!*b.v)
}

func (b invertedBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.v = !v
	return nil
}

func (b invertedBool) Type() string { return "bool" }

// failModeFlag is a policy fail mode flag. pflag's TextVar names the type
// of a pointer, which is empty, so help showed the flag bare, like a
// switch; as a "string" it shows `--policy-route-failure string`. An
// empty value (EDGEREG_POLICY_ROUTE_FAILURE=) is refused, as other empty
// settings are.
type failModeFlag struct{ m *wasm.FailMode }

func (f failModeFlag) String() string {
	if f.m == nil {
		return ""
	}
	return f.m.String()
}

func (f failModeFlag) Set(s string) error {
	if s == "" { // ParseFailMode's "" would quietly be the built-in default
		return errors.New("may not be empty: use open or closed")
	}
	return f.m.UnmarshalText([]byte(s))
}

func (f failModeFlag) Type() string { return "string" }
