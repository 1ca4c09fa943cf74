// Command nezha-operator runs the MultiRailJob controller.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/nezha-project/nezha/operator/internal/builder"
	"github.com/nezha-project/nezha/operator/internal/controller"
	"github.com/nezha-project/nezha/operator/internal/prober"
	"github.com/nezha-project/nezha/operator/internal/scheme"
	"github.com/nezha-project/nezha/operator/internal/webhook"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "nezha-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	staleDefault, err := durationEnv(controller.EnvRailNodeStaleAfter, controller.DefaultRailNodeStaleAfter)
	if err != nil {
		return err
	}
	var (
		metricsAddr  = flag.String("metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint (\"0\" disables it)")
		probeAddr    = flag.String("health-probe-bind-address", ":8081", "address of /healthz and /readyz")
		leaderElect  = flag.Bool("leader-elect", false, "elect a leader so only one replica reconciles")
		runtimeImage = flag.String("runtime-image", "", "image holding /opt/nezha, copied into workers that ask for runtime injection")
		probeRuntime = flag.Bool("probe-runtime", false, "fold each running worker's runtime /status (port 9402) into rail health")
		probeTimeout = flag.Duration("probe-timeout", time.Second, "timeout of one runtime /status probe")
		steerRails   = flag.Bool("steer-rails", true, "with --probe-runtime: drain, through the runtime's authenticated control endpoint, "+
			"a rail node agents report down while the job still uses it, and restore it when it is up again")
		railInterval = flag.Duration("rail-action-interval", controller.DefaultRailActionInterval,
			"the least time between two drain (or restore) requests for one rail of one job")
		qFailures = flag.Int("quarantine-failures", controller.DefaultQuarantineFailures,
			"quarantine a rail on a node after this many failures within --quarantine-window (0 disables)")
		qWindow       = flag.Duration("quarantine-window", controller.DefaultQuarantineWindow, "the window --quarantine-failures counts in")
		qReleaseAfter = flag.Duration("quarantine-release-after", controller.DefaultQuarantineReleaseAfter,
			"release a quarantined rail after it has been healthy without failure this long")
		staleAfter = flag.Duration("railnode-stale-after", staleDefault,
			"a RailNode whose status.observedTime is older than this has a dead agent: its rails count as unknown, not healthy (0 trusts every RailNode; env "+controller.EnvRailNodeStaleAfter+")")
		leNamespace = flag.String("leader-election-namespace", "", "namespace of the leader-election Lease (default: the pod's own namespace)")
		netpol      = flag.Bool("network-policies", true, "give every job a NetworkPolicy: its own pods reach its workers, the operator and --monitoring-namespace only the runtime's control ports")
		monitoring  = flag.String("monitoring-namespace", "monitoring", "namespace allowed to scrape the runtime's /metrics through the jobs' NetworkPolicies (empty: none)")
		opNamespace = flag.String("operator-namespace", os.Getenv("POD_NAMESPACE"), "the operator's own namespace (env POD_NAMESPACE), for the jobs' NetworkPolicies")
		opLabels    = flag.String("operator-pod-labels", "app.kubernetes.io/component=operator", "labels of the operator's pods (k=v,...), for the jobs' NetworkPolicies")
		webhookPort = flag.Int("webhook-port", 9443, "port of the admission webhook server (RailClass validation); 0 disables the webhooks")
		certDir     = flag.String("webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "directory holding the webhook's tls.crt and tls.key")
		podBatch    = flag.Duration("pod-event-batch", controller.DefaultPodEventBatch, "gather a job's pod events this long before reconciling it (fewer reconciles and status writes while thousands of workers start); 0 reconciles on every event")
		createPar   = flag.Int("create-parallelism", controller.DefaultCreateParallelism, "concurrent worker pod creations per job (1..256)")
		transports  = flag.String("runtime-transports", "tcp,rdma,sharp", "transports the injected runtime supports (comma list of tcp, rdma, sharp); a RailClass asking for another is refused at admission")
	)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	setupLog := ctrl.Log.WithName("setup")

	if *createPar < 1 || *createPar > 256 {
		return fmt.Errorf("--create-parallelism=%d is not in 1..256", *createPar)
	}
	if *podBatch < 0 {
		return fmt.Errorf("--pod-event-batch=%s is negative", *podBatch)
	}
	if *staleAfter < 0 {
		return fmt.Errorf("--railnode-stale-after=%s is negative", *staleAfter)
	}

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	if *webhookPort < 0 || *webhookPort > 65535 {
		return fmt.Errorf("--webhook-port=%d is not a port", *webhookPort)
	}
	mgr, err := ctrl.NewManager(cfg, controller.CacheAndClientOptions(ctrl.Options{
		WebhookServer:           ctrlwebhook.NewServer(ctrlwebhook.Options{Port: *webhookPort, CertDir: *certDir}),
		Metrics:                 metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:  *probeAddr,
		LeaderElection:          *leaderElect,
		LeaderElectionID:        "nezha-operator.nezha.io",
		LeaderElectionNamespace: *leNamespace,
	}, scheme.New()))
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}

	// PyTorchJob support needs the Kubeflow CRD; without it the operator still runs plain
	// workers and reports pytorchJob jobs with a condition.
	gk := schema.GroupKind{Group: kubeflowv1.GroupVersion.Group, Kind: kubeflowv1.PyTorchJobKind}
	_, mapErr := mgr.GetRESTMapper().RESTMapping(gk, kubeflowv1.GroupVersion.Version)
	pytorch := mapErr == nil
	setupLog.Info("PyTorchJob support", "enabled", pytorch)

	r := &controller.MultiRailJobReconciler{
		Client:             mgr.GetClient(),
		APIReader:          mgr.GetAPIReader(),
		Recorder:           mgr.GetEventRecorderFor("nezha-operator"),
		Clock:              clock.RealClock{},
		RuntimeImage:       *runtimeImage,
		PyTorchJobEnabled:  pytorch,
		RailNodeStaleAfter: *staleAfter,
		PodEventBatch:      *podBatch,
		CreateParallelism:  *createPar,
	}
	if *netpol {
		labels, err := parseLabels(*opLabels)
		if err != nil {
			return fmt.Errorf("--operator-pod-labels: %w", err)
		}
		if *opNamespace == "" {
			return fmt.Errorf("--network-policies needs --operator-namespace (or POD_NAMESPACE)")
		}
		r.NetworkPolicy = &builder.NetworkPolicyOptions{OperatorNamespace: *opNamespace, OperatorPodLabels: labels, MonitoringNamespace: *monitoring}
	}
	if *probeRuntime {
		r.Prober = prober.NewHTTP(*probeTimeout)
		r.SteerRails = *steerRails
	}
	if *railInterval <= 0 {
		return fmt.Errorf("--rail-action-interval must be positive, got %s", *railInterval)
	}
	r.RailActionInterval = *railInterval
	supported, err := webhook.ParseTransports(*transports)
	if err != nil {
		return err
	}
	if *webhookPort != 0 {
		if err := webhook.SetupRailClassWebhook(mgr, supported); err != nil {
			return fmt.Errorf("set up webhooks: %w", err)
		}
		// Pods of other controllers (Trainer v2, JobSet, PyTorchJob) that ask for rails; the
		// chart's MutatingWebhookConfiguration selects them by label.
		mgr.GetWebhookServer().Register(webhook.PodRailsPath, &admission.Webhook{Handler: &webhook.PodRailInjector{
			Client: mgr.GetClient(), Decoder: admission.NewDecoder(mgr.GetScheme()), RuntimeImage: *runtimeImage,
		}})
		setupLog.Info("admission webhooks", "port", *webhookPort, "certDir", *certDir)
	}
	if *qFailures < 0 {
		return fmt.Errorf("--quarantine-failures=%d is negative", *qFailures)
	}
	quarantine := &controller.RailQuarantineReconciler{
		Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor("nezha-operator"), Clock: clock.RealClock{},
		Policy: controller.QuarantinePolicy{Failures: *qFailures, Window: *qWindow, ReleaseAfter: *qReleaseAfter},
	}
	if err := quarantine.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up rail quarantine: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("set up controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	setupLog.Info("starting", "runtimeImage", *runtimeImage, "railNodeStaleAfter", staleAfter.String())
	return mgr.Start(ctx)
}

// durationEnv reads a flag default from the environment, so a Deployment can set it either way.
func durationEnv(name string, def time.Duration) (time.Duration, error) {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want a duration such as 90s: %w", name, v, err)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s=%q is negative", name, v)
	}
	return d, nil
}

// parseLabels reads "k=v,k2=v2" into a map (keys and values as Kubernetes labels allow).
func parseLabels(s string) (map[string]string, error) {
	sel, err := labels.ConvertSelectorToLabelsMap(s)
	if err != nil {
		return nil, err
	}
	if len(sel) == 0 {
		return nil, fmt.Errorf("%q selects every pod; give at least one label", s)
	}
	return sel, nil
}
