package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/remoting"
)

// Gateway defaults: RocketMQ's NameServer port on TCP (a node's QUIC is
// UDP 9876, so both fit on one machine), and the admin port after the
// node's 9877.
const (
	defaultGatewayListen = "127.0.0.1:9876"
	defaultGatewayAdmin  = "127.0.0.1:9878"
)

type gatewayFlags struct {
	cfg       gateway.Config
	listen    string
	admin     string
	limits    remoting.Limits
	shutdown  time.Duration
	logFormat string
	logLevel  string
	src       nodeSourceFlags
}

func newGatewayCmd(g *globals) *cobra.Command {
	gf := &gatewayFlags{}
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run an edge site's gateway: RocketMQ remoting on the LAN, edgereg QUIC to the nodes",
		Long: `Run a local NameServer for an edge site. Unmodified RocketMQ brokers and clients
point their namesrvAddr at it (TCP, default 127.0.0.1:9876); it talks QUIC with
mutual TLS to every edgereg node (--nodes, --nodes-dns, --nodes-srv or
--nodes-url), with the credential of --cert/--key/--ca: a broker certificate
naming the site's broker groups.

Brokers' registrations become one registrar session per node, keeping their
topic sets (a topic a broker stops listing is removed a period later); their 30 s
re-registrations and 1 Hz heartbeats cost the WAN nothing extra. Route reads are answered from a cache that node watches keep
current, and keep being answered from it while the WAN is lossy or cut. Metrics
and health are on --admin-addr (/metrics, /healthz).

Remoting has no authentication: keep --listen on loopback or a trusted LAN.
SIGINT, SIGTERM or SIGHUP stops the gateway without unregistering its brokers (their
leases run on, and they register with the next gateway at their next period).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuseGatewaySettings(cmd.Flags()); err != nil {
				return usageError{fmt.Errorf("invalid configuration: %w", err)}
			}
			return runGateway(cmd, g, gf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&gf.listen, "listen", defaultGatewayListen, "TCP address for RocketMQ remoting (brokers' and clients' namesrvAddr)")
	f.StringVar(&gf.admin, "admin-addr", defaultGatewayAdmin, `HTTP address for /healthz and /metrics; "off" disables`)
	f.StringVar(&gf.cfg.Attrs.Zone, "zone", "", "the site's zone, sent to route policies with every read")
	f.DurationVar(&gf.cfg.BrokerTimeout, "broker-timeout", gateway.DefaultBrokerTimeout, "unregister a broker silent for this long (unless it names its own heartbeat timeout)")
	f.BoolVar(&gf.cfg.UnregisterOnClose, "unregister-on-close", false, "unregister a broker as soon as its TCP connection closes, as a NameServer does")
	f.DurationVar(&gf.cfg.PollInterval, "poll-interval", gateway.DefaultPollInterval, "how old cached cluster info and topic lists may get before they are read again")
	f.DurationVar(&gf.cfg.HeartbeatInterval, "heartbeat-interval", 30*time.Second, "how often the brokers' leases are renewed on every node")
	f.DurationVar(&gf.cfg.RequestTimeout, "request-timeout", gateway.DefaultRequestTimeout, "timeout of one request to one node (at most 4s: a read waits for the nodes at most that long, under rocketmq-client-go's 6 s)")
	f.IntVar(&gf.cfg.MaxTopics, "max-topics", gateway.DefaultMaxTopics, "topics whose routes are cached and watched")
	f.IntVar(&gf.cfg.MaxBrokers, "max-brokers", gateway.DefaultMaxBrokers, "brokers the gateway registers (each holds a QUIC connection to every node: keep it under the nodes' --max-broker-conns-per-host, 1024 by default, less 2)")
	f.IntVar(&gf.limits.MaxConns, "max-conns", remoting.DefaultMaxConns, "remoting connections in total")
	f.IntVar(&gf.limits.MaxConnsPerHost, "max-conns-per-host", remoting.DefaultMaxConnsPerHost, "remoting connections per source IP (on a loopback --listen, where every peer is 127.0.0.1, default --max-conns, with all the workers and buffered bytes)")
	f.IntVar(&gf.limits.Workers, "workers", remoting.DefaultWorkers, "remoting requests handled at once (at most half of them for one source IP)")
	f.Int64Var(&gf.limits.MaxBufferedBytes, "max-buffered-bytes", remoting.DefaultMaxBufferedBytes, "request bytes all remoting connections may hold at once (frames arriving or waiting); past it the gateway stops reading until requests finish")
	f.DurationVar(&gf.shutdown, "shutdown-timeout", 10*time.Second, "how long a graceful stop waits for requests in progress")
	f.StringVar(&gf.logFormat, "log-format", "auto", "log format: auto, text or json")
	f.StringVar(&gf.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	gf.src.add(cmd)
	return cmd
}

// refuseGatewaySettings refuses, naming the flag, what the gateway would
// otherwise take as its default without a word (refuseAgentSettings: an
// empty --listen listened on every interface), and a --request-timeout
// longer than a read may wait for the nodes (gateway.DefaultUpstreamTimeout).
func refuseGatewaySettings(fs *pflag.FlagSet) error {
	if err := refuseAgentSettings(fs); err != nil {
		return err
	}
	if f := fs.Lookup("request-timeout"); f != nil {
		if d, _ := time.ParseDuration(f.Value.String()); d > gateway.DefaultUpstreamTimeout {
			return fmt.Errorf("--request-timeout %s (%s): at most %s, how long a read waits for the nodes, failovers included, so that it stays under rocketmq-client-go's 6 s request timeout",
				f.Value, flagSource(f), gateway.DefaultUpstreamTimeout)
		}
	}
	return nil
}

func runGateway(cmd *cobra.Command, g *globals, gf *gatewayFlags) error {
	logger, err := newLogger(os.Stderr, gf.logFormat, gf.logLevel, cmd.Flags())
	if err != nil {
		return usageError{err}
	}
	applyContainerMemoryLimit(logger) // edge sites run it in small containers
	src, err := gf.src.source(g)
	if err != nil {
		return err
	}
	conf, err := g.clientTLS()
	if err != nil {
		return err
	}
	cfg := gf.cfg
	cfg.Nodes, cfg.TLS, cfg.Logger = src, conf, logger
	gw, err := gateway.New(cfg)
	if err != nil {
		return usageError{err}
	}
	defer gw.Close()
	ln, err := net.Listen("tcp", gf.listen)
	if err != nil {
		return err
	}
	if !loopbackAddr(ln.Addr()) {
		logger.Warn("remoting listens beyond loopback: it has no authentication, keep it on a trusted LAN", "listen", ln.Addr().String())
	}
	limits := gf.limits
	if loopbackAddr(ln.Addr()) && !cmd.Flags().Changed("max-conns-per-host") {
		limits = oneHostLimits(limits)
	}
	srv := &remoting.Server{Handler: gw, Limits: limits, Logger: logger}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	var admin *http.Server
	if gf.admin != "off" {
		aln, err := net.Listen("tcp", gf.admin)
		if err != nil {
			srv.Shutdown(context.Background())
			return err
		}
		admin = serveGatewayAdmin(aln, gw, logger)
	}
	logger.Info("gateway listening for RocketMQ remoting", "addr", ln.Addr().String())

	// As a node's: the first signal begins a graceful stop, a second
	// ends it at once (stopOnSignals).
	ctx, now, release := stopOnSignals(cmd.Context())
	defer release()
	select {
	case err := <-served:
		return fmt.Errorf("remoting listener: %w", err)
	case <-ctx.Done():
	}
	logger.Info("gateway shutting down", "shutdown_timeout", gf.shutdown.String())
	err = stopGracefully(now, gf.shutdown, logger, func(ctx context.Context) error {
		err := srv.Shutdown(ctx)
		if admin != nil {
			admin.Shutdown(ctx)
		}
		return err
	})
	// The gateway's own failure (exit 1), as a node's stop past it is,
	// not a client's "no node answered in time" (exit 4).
	switch {
	case errors.Is(err, errSecondSignal):
		err = nodeFailure{err}
	case err != nil:
		err = nodeFailure{fmt.Errorf("requests still in progress after --shutdown-timeout %s: %w", gf.shutdown, err)}
	}
	if serr := <-served; !errors.Is(serr, remoting.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	logger.Info("gateway stopped; its brokers' leases run on until they register again")
	return err
}

// serveGatewayAdmin serves /healthz and /metrics on aln.
func serveGatewayAdmin(aln net.Listener, gw *gateway.Gateway, logger *slog.Logger) *http.Server {
	admin := gatewayAdminServer(node.GuardLoopback(aln.Addr().String(), gw.AdminHandler()), logger)
	go admin.Serve(aln)
	logger.Info("gateway admin listening", "addr", aln.Addr().String())
	if !loopbackAddr(aln.Addr()) {
		logger.Warn("admin address listens beyond loopback: /healthz and /metrics name every broker and node and have no authentication, anyone who reaches it reads them",
			"admin_addr", aln.Addr().String())
	}
	return admin
}

// oneHostLimits gives one source IP the whole of l. On loopback every
// broker and client of the machine connects from 127.0.0.1: shares meant to
// keep one host from starving others (64 connections, half the workers, a
// quarter of the buffered bytes) would cap the whole machine instead.
func oneHostLimits(l remoting.Limits) remoting.Limits {
	l.MaxConnsPerHost = cmp.Or(l.MaxConns, remoting.DefaultMaxConns)
	l.MaxInFlightPerHost = cmp.Or(l.Workers, remoting.DefaultWorkers)
	l.MaxBufferedBytesPerHost = cmp.Or(l.MaxBufferedBytes, remoting.DefaultMaxBufferedBytes)
	return l
}

// loopbackAddr reports whether a listener's address is on loopback only.
func loopbackAddr(a net.Addr) bool {
	ap, ok := a.(*net.TCPAddr)
	return !ok || ap.IP.IsLoopback()
}

// gatewayAdminServer is the HTTP server of the gateway's admin address,
// with the node's timeouts.
func gatewayAdminServer(h http.Handler, log *slog.Logger) *http.Server {
	return node.NewHTTPServer(h, log)
}
