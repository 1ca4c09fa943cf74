// Command nezha-operator runs the MultiRailJob controller and quarantine by evidence, configured by
// one file: nezha-operator --config=FILE [--kubeconfig=FILE] [--zap-log-level=info]
// (operator/README.md "Configuration").
package main

import (
	"flag"
	"fmt"
	"os"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	configapi "github.com/nezha-project/nezha/operator/api/config/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
	"github.com/nezha-project/nezha/operator/internal/controller"
	"github.com/nezha-project/nezha/operator/internal/prober"
	"github.com/nezha-project/nezha/operator/internal/quarantine"
	"github.com/nezha-project/nezha/operator/internal/scheme"
	"github.com/nezha-project/nezha/operator/internal/webhook"
	"github.com/nezha-project/nezha/operator/pkg/config"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "nezha-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	configFile := flag.String("config", "", "the operator's configuration file, a "+configapi.GroupVersion.String()+
		" Configuration (operator/README.md \"Configuration\"); required")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	setupLog := ctrl.Log.WithName("setup")

	if *configFile == "" {
		return fmt.Errorf("--config is required: the operator's %s Configuration file", configapi.GroupVersion)
	}
	conf, err := config.Load(*configFile)
	if err != nil {
		return err
	}

	kubeconfig, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	webhookPort := int(*conf.Webhook.Port)
	opts := controller.CacheAndClientOptions(ctrl.Options{
		WebhookServer:           ctrlwebhook.NewServer(ctrlwebhook.Options{Port: webhookPort, CertDir: conf.Webhook.CertDir}),
		Metrics:                 metricsserver.Options{BindAddress: conf.Metrics.BindAddress},
		HealthProbeBindAddress:  conf.Health.HealthProbeBindAddress,
		LeaderElection:          *conf.LeaderElection.LeaderElect,
		LeaderElectionID:        "nezha-operator.nezha.io",
		LeaderElectionNamespace: conf.LeaderElection.ResourceNamespace,
	}, scheme.New())
	if len(conf.WatchNamespaces) > 0 {
		// Namespaced install: namespaced objects are watched in these namespaces only, which
		// the chart's per-namespace Roles allow (cluster-scoped ones still cluster-wide).
		opts.Cache.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range conf.WatchNamespaces {
			opts.Cache.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(kubeconfig, opts)
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
		RuntimeImage:       conf.Runtime.Image,
		PyTorchJobEnabled:  pytorch,
		RailNodeStaleAfter: conf.RailNodes.StaleAfter.Duration,
		PodEventBatch:      conf.WorkerPods.EventBatch.Duration,
		CreateParallelism:  int(*conf.WorkerPods.CreateParallelism),
		RailActionInterval: conf.RuntimeControl.RailActionInterval.Duration,
	}
	if *conf.NetworkPolicy.Enabled {
		r.NetworkPolicy = &builder.NetworkPolicyOptions{OperatorNamespace: conf.Namespace,
			OperatorPodLabels: conf.NetworkPolicy.OperatorPodLabels, MonitoringNamespace: *conf.NetworkPolicy.MonitoringNamespace}
	}
	if *conf.RuntimeControl.Probe {
		r.Prober = prober.NewHTTP(conf.RuntimeControl.ProbeTimeout.Duration)
		r.SteerRails = *conf.RuntimeControl.SteerRails
	}
	if webhookPort != 0 {
		if err := webhook.SetupRailClassWebhook(mgr, conf.Runtime.Transports); err != nil {
			return fmt.Errorf("set up webhooks: %w", err)
		}
		// Pods of other controllers (Trainer v2, JobSet, PyTorchJob) that ask for rails; the
		// chart's MutatingWebhookConfiguration selects them by label.
		mgr.GetWebhookServer().Register(webhook.PodRailsPath, &admission.Webhook{Handler: &webhook.PodRailInjector{
			Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Decoder: admission.NewDecoder(mgr.GetScheme()), RuntimeImage: conf.Runtime.Image,
			NetworkPolicy: r.NetworkPolicy,
		}})
		setupLog.Info("admission webhooks", "port", webhookPort, "certDir", conf.Webhook.CertDir)
	}
	railQuarantine := &quarantine.Reconciler{
		Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor("nezha-operator"), Clock: clock.RealClock{},
		Policy: quarantine.Policy{Failures: int(*conf.Quarantine.Failures), Window: conf.Quarantine.Window.Duration,
			ReleaseAfter: conf.Quarantine.ReleaseAfter.Duration},
	}
	if err := railQuarantine.SetupWithManager(mgr); err != nil {
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
	setupLog.Info("starting", "config", *configFile, "runtimeImage", conf.Runtime.Image,
		"railNodeStaleAfter", conf.RailNodes.StaleAfter.Duration.String())
	return mgr.Start(ctx)
}
