// Command nezha-rail-agent runs on every node (DaemonSet, hostNetwork): it watches the host
// interfaces that back the cluster's rails and publishes the node's RailNode. Its install-cni
// subcommand copies the nezha-rail CNI plugin into the node's CNI bin directory.
//
//	nezha-rail-agent --node-name=$(NODE_NAME) [--metrics-bind-address=:9403] [--coalesce-window=200ms]
//	nezha-rail-agent install-cni --from=/nezha-rail --to=/host/opt/cni/bin
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/nezha-project/nezha/cni/pkg/agent"
	"github.com/nezha-project/nezha/cni/pkg/discovery"
	"github.com/nezha-project/nezha/cni/pkg/install"
)

// version is stamped at build time (-ldflags "-X main.version=...").
var version = "dev"

// Tunables of the command itself, with their environment variables.
const (
	envNodeName       = "NODE_NAME"
	envMetricsAddr    = "NEZHA_AGENT_METRICS_ADDR"
	envMetricsIP      = "NEZHA_AGENT_METRICS_BIND_IP"
	defaultMetricsAdr = ":9403"
	envSysClassNet    = "NEZHA_AGENT_SYS_CLASS_NET"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "install-cni" {
		err := installCNI(os.Args[2:])
		var usage usageError
		switch {
		case err == nil:
		case errors.Is(err, flag.ErrHelp):
			// --help printed the usage: asked for, so not a failure.
		case errors.As(err, &usage):
			os.Exit(2) // the flag package already printed the error and the usage
		default:
			fmt.Fprintln(os.Stderr, "nezha-rail-agent:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "nezha-rail-agent:", err)
		os.Exit(1)
	}
}

func installCNI(args []string) error {
	fs := flag.NewFlagSet("install-cni", flag.ContinueOnError)
	from := fs.String("from", "/nezha-rail", "plugin binary to install")
	to := fs.String("to", "/host/opt/cni/bin", "CNI bin directory of the node (mounted)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "install-cni: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	dst, err := install.Binary(*from, *to)
	if err != nil {
		return err
	}
	fmt.Println("installed", dst)
	return nil
}

// usageError is a bad command line (exit 2, as getopt tools do); the usage is already printed.
type usageError struct{ error }

func run() error {
	opts := agent.Options{AgentVersion: version}
	var err error
	durations := []struct {
		flag, env, help string
		def             time.Duration
		dst             *time.Duration
	}{
		{"coalesce-window", agent.EnvCoalesceWindow, "link changes within this window make one RailNode write", agent.DefaultCoalesceWindow, &opts.CoalesceWindow},
		{"resync-period", agent.EnvResyncPeriod, "re-read all links and rewrite the RailNode this often", agent.DefaultResyncPeriod, &opts.ResyncPeriod},
		{"max-retry-backoff", agent.EnvMaxRetryBackoff, "cap of the backoff between failed RailNode writes", agent.DefaultMaxRetryBackoff, &opts.MaxRetryBackoff},
	}
	for _, d := range durations {
		def, err := agent.DurationFromEnv(d.env, d.def)
		if err != nil {
			return err
		}
		flag.DurationVar(d.dst, d.flag, def, d.help+" (env "+d.env+")")
	}
	flag.StringVar(&opts.NodeName, "node-name", os.Getenv(envNodeName), "name of this node (env "+envNodeName+")")
	flag.StringVar(&opts.NetNSPath, "netns", "", "network namespace to watch instead of the agent's own (testing)")
	sysDefault := os.Getenv(envSysClassNet)
	if sysDefault == "" {
		sysDefault = discovery.DefaultSysClassNet
	}
	flag.StringVar(&opts.SysClassNet, "sys-class-net", sysDefault, "sysfs network class directory (env "+envSysClassNet+")")
	metricsDefault := os.Getenv(envMetricsAddr)
	if metricsDefault == "" {
		metricsDefault = defaultMetricsAdr
	}
	metricsAddr := flag.String("metrics-bind-address", metricsDefault, "address of /metrics, /healthz and /readyz; \"0\" disables (env "+envMetricsAddr+")")
	metricsIP := flag.String("metrics-bind-ip", os.Getenv(envMetricsIP), "the node's own address: /metrics listens there only, "+
		"not on every host address (rail interfaces included; the agent runs in the host network) (env "+envMetricsIP+")")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	listen, err := metricsListenAddress(*metricsAddr, *metricsIP)
	if err != nil {
		return err
	}
	metricsAddr = &listen

	log := zap.New(zap.UseFlagOptions(&zapOpts)).WithName("rail-agent")
	ctrl.SetLogger(log)
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	a, err := agent.NewFromConfig(cfg, opts, log)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if *metricsAddr != "0" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		if err := a.Metrics().Register(reg); err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		// Ready once this node's RailNode is written and while writes succeed (Agent.Ready).
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !a.Ready() {
				http.Error(w, "RailNode not written: the latest write failed or none was made yet", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok"))
		})
		// Every connection is served on its own goroutine under these bounds, so stray, slow or
		// idle clients cost nothing but themselves.
		srv := &http.Server{Addr: *metricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second,
			MaxHeaderBytes: 16 << 10}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "metrics server stopped")
				stop()
			}
		}()
		defer func() { _ = srv.Shutdown(context.Background()) }()
	}
	log.Info("starting", "node", opts.NodeName, "version", version, "coalesceWindow", opts.CoalesceWindow.String())
	return a.Run(ctx)
}

// metricsListenAddress puts ip (when set) in place of addr's host: in the host network an
// address like ":9403" listens on the rails too, which any pod on a rail network could reach.
func metricsListenAddress(addr, ip string) (string, error) {
	if addr == "0" || ip == "" {
		return addr, nil
	}
	if net.ParseIP(ip) == nil {
		return "", fmt.Errorf("flag --metrics-bind-ip (env %s): %q is not an IP address", envMetricsIP, ip)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("flag --metrics-bind-address: %q: %w", addr, err)
	}
	return net.JoinHostPort(ip, port), nil
}
