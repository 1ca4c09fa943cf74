package config

import (
	"net"
	"slices"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	configapi "github.com/nezha-project/nezha/operator/api/config/v1alpha1"
)

// maxCreateParallelism bounds workerPods.createParallelism: more concurrent creations than this
// from one job only queue in the API server's own limits.
const maxCreateParallelism = 256

// Validate checks a defaulted Configuration and names every bad field by its path in the file.
func Validate(c *configapi.Configuration) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateBindAddress(field.NewPath("health", "healthProbeBindAddress"), c.Health.HealthProbeBindAddress)...)
	errs = append(errs, validateBindAddress(field.NewPath("metrics", "bindAddress"), c.Metrics.BindAddress)...)
	errs = append(errs, validateWebhook(field.NewPath("webhook"), &c.Webhook)...)
	errs = append(errs, validateNamespace(field.NewPath("leaderElection", "resourceNamespace"), c.LeaderElection.ResourceNamespace)...)
	errs = append(errs, validateWatchNamespaces(field.NewPath("watchNamespaces"), c.WatchNamespaces)...)
	errs = append(errs, validateRuntime(field.NewPath("runtime"), &c.Runtime)...)

	rc := field.NewPath("runtimeControl")
	errs = append(errs, validatePositive(rc.Child("probeTimeout"), c.RuntimeControl.ProbeTimeout)...)
	errs = append(errs, validatePositive(rc.Child("railActionInterval"), c.RuntimeControl.RailActionInterval)...)

	errs = append(errs, validateQuarantine(field.NewPath("quarantine"), &c.Quarantine)...)
	errs = append(errs, validateNotNegative(field.NewPath("railNodes", "staleAfter"), c.RailNodes.StaleAfter)...)
	errs = append(errs, validateNetworkPolicy(c)...)

	wp := field.NewPath("workerPods")
	errs = append(errs, validateNotNegative(wp.Child("eventBatch"), c.WorkerPods.EventBatch)...)
	if p := c.WorkerPods.CreateParallelism; p == nil || *p < 1 || *p > maxCreateParallelism {
		errs = append(errs, field.Invalid(wp.Child("createParallelism"), deref(p), "must be in 1..256"))
	}
	return errs
}

// validateBindAddress accepts what controller-runtime's servers accept: host:port, or "0" to
// turn the endpoint off.
func validateBindAddress(path *field.Path, addr string) field.ErrorList {
	if addr == "0" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return field.ErrorList{field.Invalid(path, addr, `want host:port (":8080" for every address) or "0" to turn it off`)}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return field.ErrorList{field.Invalid(path, addr, "the port must be a number in 0..65535")}
	}
	return nil
}

func validateWebhook(path *field.Path, w *configapi.ControllerWebhook) field.ErrorList {
	if w.Port == nil || *w.Port < 0 || *w.Port > 65535 {
		return field.ErrorList{field.Invalid(path.Child("port"), deref(w.Port), "must be a port in 1..65535, or 0 to turn the webhooks off")}
	}
	if *w.Port != 0 && w.CertDir == "" {
		return field.ErrorList{field.Required(path.Child("certDir"), "the webhook server needs its certificate directory")}
	}
	return nil
}

func validateRuntime(path *field.Path, r *configapi.Runtime) field.ErrorList {
	var errs field.ErrorList
	known := configapi.DefaultRuntimeTransports()
	if len(r.Transports) == 0 {
		errs = append(errs, field.Required(path.Child("transports"), "the runtime supports at least one transport"))
	}
	for i, t := range r.Transports {
		switch {
		case !slices.Contains(known, t):
			errs = append(errs, field.NotSupported(path.Child("transports").Index(i), t, known))
		case slices.Contains(r.Transports[:i], t):
			errs = append(errs, field.Duplicate(path.Child("transports").Index(i), t))
		}
	}
	return errs
}

func validateQuarantine(path *field.Path, q *configapi.Quarantine) field.ErrorList {
	if q.Failures == nil || *q.Failures < 0 {
		return field.ErrorList{field.Invalid(path.Child("failures"), deref(q.Failures), "must be 0 (off) or more")}
	}
	if *q.Failures == 0 {
		return nil // off: the window and release period are not used
	}
	var errs field.ErrorList
	errs = append(errs, validatePositive(path.Child("window"), q.Window)...)
	errs = append(errs, validatePositive(path.Child("releaseAfter"), q.ReleaseAfter)...)
	return errs
}

func validateNetworkPolicy(c *configapi.Configuration) field.ErrorList {
	path := field.NewPath("networkPolicy")
	np := &c.NetworkPolicy
	var errs field.ErrorList
	if np.MonitoringNamespace != nil {
		errs = append(errs, validateNamespace(path.Child("monitoringNamespace"), *np.MonitoringNamespace)...)
	}
	if np.Enabled == nil || !*np.Enabled {
		return errs
	}
	if c.Namespace == "" {
		errs = append(errs, field.Required(field.NewPath("namespace"), "networkPolicy.enabled needs the operator's namespace, to let its pods reach the runtimes"))
	} else {
		errs = append(errs, validateNamespace(field.NewPath("namespace"), c.Namespace)...)
	}
	labels := path.Child("operatorPodLabels")
	if len(np.OperatorPodLabels) == 0 {
		errs = append(errs, field.Required(labels, "an empty selector selects every pod of the namespace; give the operator pods' labels"))
	}
	errs = append(errs, metav1validation.ValidateLabels(np.OperatorPodLabels, labels)...)
	return errs
}

func validateNamespace(path *field.Path, ns string) field.ErrorList {
	if ns == "" {
		return nil
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(ns) {
		errs = append(errs, field.Invalid(path, ns, msg))
	}
	return errs
}

func validatePositive(path *field.Path, d *metav1.Duration) field.ErrorList {
	if d == nil || d.Duration <= 0 {
		return field.ErrorList{field.Invalid(path, durationString(d), "must be a positive duration, such as 10s")}
	}
	return nil
}

func validateNotNegative(path *field.Path, d *metav1.Duration) field.ErrorList {
	if d == nil || d.Duration < 0 {
		return field.ErrorList{field.Invalid(path, durationString(d), "must not be negative (0s turns it off)")}
	}
	return nil
}

func durationString(d *metav1.Duration) string {
	if d == nil {
		return "<unset>"
	}
	return d.Duration.String()
}

func deref(p *int32) any {
	if p == nil {
		return "<unset>"
	}
	return *p
}

func validateWatchNamespaces(path *field.Path, namespaces []string) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, ns := range namespaces {
		if ns == "" {
			errs = append(errs, field.Required(path.Index(i), "a namespace name"))
			continue
		}
		if seen[ns] {
			errs = append(errs, field.Duplicate(path.Index(i), ns))
		}
		seen[ns] = true
		errs = append(errs, validateNamespace(path.Index(i), ns)...)
	}
	return errs
}
