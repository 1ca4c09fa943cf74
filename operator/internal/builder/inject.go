package builder

import (
	"fmt"
	"strconv"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// Where the runtime lands when the init container copies it in; matches the runtime image's own
// layout (/opt/nezha/{lib,python}) so the same paths work with and without injection.
const (
	runtimeVolumeName    = "nezha-runtime"
	runtimeMountPath     = "/opt/nezha"
	runtimeStagingPath   = "/nezha-runtime"
	runtimeInitContainer = "nezha-runtime-install"
)

// Injection is what the operator adds to every worker pod template of a job.
type Injection struct {
	Rails []Rail
	// Env is the runtime contract (see RuntimeEnv); set on every container, replacing user
	// values of the same name so the contract cannot be broken by accident.
	Env []corev1.EnvVar
	// Labels are added to the pod template.
	Labels map[string]string
	// RuntimeImage, when not empty, adds the init container that copies the runtime in.
	RuntimeImage string
	// AvoidNodes are nodes where one of the job's rails is down (see AvoidNodes).
	AvoidNodes []string
	// NCCL adds the NCCL net plugin's environment (spec.runtime.integration: nccl).
	NCCL bool
	// TokenSecret is the job's token Secret, mounted read-only at TokenFilePath (token_file.go).
	TokenSecret string
}

// InjectTemplate adds the rails (Multus networks annotation, SR-IOV resources), the runtime
// environment and optionally the runtime init container to a pod template, in place.
func InjectTemplate(t *corev1.PodTemplateSpec, in Injection) error {
	if len(t.Spec.Containers) == 0 {
		return fmt.Errorf("pod template has no containers")
	}
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	for k, v := range in.Labels {
		t.Labels[k] = v
	}
	if t.Annotations == nil {
		t.Annotations = map[string]string{}
	}
	networks, err := NetworksAnnotation(t.Annotations[nadv1.NetworkAttachmentAnnot], in.Rails)
	if err != nil {
		return err
	}
	t.Annotations[nadv1.NetworkAttachmentAnnot] = networks
	t.Annotations[nezhav1.RailsAnnotation] = RailsEnv(in.Rails)

	addSRIOVResources(&t.Spec.Containers[0], in.Rails)
	addControlPort(&t.Spec.Containers[0])
	if in.NCCL {
		addNCCLPort(&t.Spec.Containers[0])
	}
	for i := range t.Spec.Containers {
		c := &t.Spec.Containers[i]
		c.Env = mergeEnv(c.Env, in.Env)
		// A runtime that cannot start (a rail failing pre-flight under onPreflightFailure: Fail,
		// bad configuration) says why in its last log lines; the operator puts them in the
		// job's Failed condition. A user's own choice is kept.
		if c.TerminationMessagePolicy == "" {
			c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
		}
		if in.NCCL {
			addNCCLEnv(c)
		}
	}
	if in.TokenSecret != "" {
		mountToken(&t.Spec, in.TokenSecret)
	}
	if in.RuntimeImage != "" {
		injectRuntime(&t.Spec, in.RuntimeImage)
	}
	AvoidNodes(&t.Spec, in.AvoidNodes)
	return nil
}

// addSRIOVResources requests one device per rail on the first container: device plugins
// allocate per container, and the VF is moved into the pod's network namespace whichever
// container asked for it. A user request larger than the rails need is kept.
func addSRIOVResources(c *corev1.Container, rails []Rail) {
	need := map[corev1.ResourceName]int64{}
	for _, r := range rails {
		if r.SRIOVResourceName != "" {
			need[corev1.ResourceName(r.SRIOVResourceName)]++
		}
	}
	if len(need) == 0 {
		return
	}
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	if c.Resources.Limits == nil {
		c.Resources.Limits = corev1.ResourceList{}
	}
	for name, n := range need {
		// Extended resources need requests == limits.
		have := c.Resources.Limits[name]
		if have.Value() > n {
			n = have.Value()
		}
		q := *resource.NewQuantity(n, resource.DecimalSI)
		c.Resources.Requests[name] = q
		c.Resources.Limits[name] = q
	}
}

// mergeEnv returns env with every variable of add set (replacing same-named ones in place,
// appending the rest in order).
func mergeEnv(env, add []corev1.EnvVar) []corev1.EnvVar {
	out := append([]corev1.EnvVar(nil), env...)
	for _, a := range add {
		replaced := false
		for i := range out {
			if out[i].Name == a.Name {
				out[i] = a
				replaced = true
			}
		}
		if !replaced {
			out = append(out, a)
		}
	}
	return out
}

// injectRuntime adds an emptyDir, an init container that copies /opt/nezha from the runtime image
// into it, mounts it at /opt/nezha in every container and puts its lib and python directories
// first on LD_LIBRARY_PATH and PYTHONPATH (keeping values the template sets).
func injectRuntime(spec *corev1.PodSpec, image string) {
	for _, v := range spec.Volumes {
		if v.Name == runtimeVolumeName {
			return // already injected
		}
	}
	spec.Volumes = append(spec.Volumes, corev1.Volume{
		Name:         runtimeVolumeName,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
	})
	spec.InitContainers = append(spec.InitContainers, corev1.Container{
		Name:            runtimeInitContainer,
		Image:           image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		// -R, not -a: a non-root copy cannot (and need not) keep the image's file owners.
		Command:         []string{"/bin/sh", "-c", "cp -R " + runtimeMountPath + "/. " + runtimeStagingPath + "/"},
		VolumeMounts:    []corev1.VolumeMount{{Name: runtimeVolumeName, MountPath: runtimeStagingPath}},
		SecurityContext: RestrictedSecurityContext(),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
	})
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{
			Name: runtimeVolumeName, MountPath: runtimeMountPath, ReadOnly: true,
		})
		c.Env = mergeEnv(c.Env, []corev1.EnvVar{
			prependPath(c.Env, "LD_LIBRARY_PATH", runtimeMountPath+"/lib"),
			prependPath(c.Env, "PYTHONPATH", runtimeMountPath+"/python"),
		})
	}
}

// RuntimeUID is the non-root user of the runtime image and of the container the operator
// injects (images/runtime/Dockerfile creates it).
const RuntimeUID = 65532

// RestrictedSecurityContext satisfies Pod Security "restricted": non-root, no privilege
// escalation, every capability dropped, the runtime's default seccomp profile, and a read-only
// root filesystem (the copy goes to an emptyDir).
func RestrictedSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To[int64](RuntimeUID),
		RunAsGroup:               ptr.To[int64](RuntimeUID),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func prependPath(env []corev1.EnvVar, name, dir string) corev1.EnvVar {
	for _, e := range env {
		if e.Name == name && e.Value != "" {
			if e.Value == dir || strings.HasPrefix(e.Value, dir+":") {
				return e // already first (the NCCL integration put it there)
			}
			return corev1.EnvVar{Name: name, Value: dir + ":" + e.Value}
		}
	}
	return corev1.EnvVar{Name: name, Value: dir}
}

// RuntimeEnvOptions are the job-level values of the runtime contract.
type RuntimeEnvOptions struct {
	Job        *nezhav1.MultiRailJob
	Rails      []Rail
	Rendezvous string
	// WorldSize and Rank are set for plain workers; a PyTorchJob's launcher sets RANK and
	// WORLD_SIZE itself, which the runtime falls back to.
	WorldSize *int32
	Rank      *int32
}

// RuntimeEnv is the NEZHA_* environment of one worker.
func RuntimeEnv(o RuntimeEnvOptions) []corev1.EnvVar {
	rt := o.Job.Spec.Runtime
	policy := rt.Policy
	if policy == "" {
		policy = nezhav1.PolicyAdaptive
	}
	cold := "auto"
	if rt.ColdThreshold != nil {
		cold = strconv.FormatInt(rt.ColdThreshold.Value(), 10)
	}
	env := []corev1.EnvVar{{Name: nezhav1.EnvRails, Value: RailsEnv(o.Rails)}}
	if o.Rank != nil {
		env = append(env, corev1.EnvVar{Name: nezhav1.EnvRank, Value: strconv.Itoa(int(*o.Rank))})
	}
	if o.WorldSize != nil {
		env = append(env, corev1.EnvVar{Name: nezhav1.EnvWorldSize, Value: strconv.Itoa(int(*o.WorldSize))})
	}
	env = append(env,
		corev1.EnvVar{Name: nezhav1.EnvRendezvous, Value: o.Rendezvous},
		corev1.EnvVar{Name: nezhav1.EnvJobTokenFile, Value: TokenFilePath},
		corev1.EnvVar{Name: nezhav1.EnvControlAddr, Value: ":" + strconv.Itoa(nezhav1.ControlPort)},
		corev1.EnvVar{Name: nezhav1.EnvJobName, Value: o.Job.Name},
		corev1.EnvVar{Name: nezhav1.EnvPolicy, Value: string(policy)},
		corev1.EnvVar{Name: nezhav1.EnvColdThreshold, Value: cold},
	)
	env = append(env, corev1.EnvVar{Name: nezhav1.EnvPreflight, Value: PreflightEnv(o.Job.Spec.FailurePolicy.OnPreflightFailure)})
	if d := rt.Failover.RailTimeout; d != nil {
		env = append(env, corev1.EnvVar{Name: nezhav1.EnvIOTimeoutMillis, Value: strconv.FormatInt(d.Milliseconds(), 10)})
	}
	// failover.probeInterval is not passed on: the runtime has no rail probe-back to tune yet.
	return env
}

// PreflightEnv is NEZHA_PREFLIGHT for a job's onPreflightFailure (unset: StartWithoutRail).
func PreflightEnv(a nezhav1.PreflightAction) string {
	switch a {
	case nezhav1.PreflightFail:
		return "fail"
	case nezhav1.PreflightWait:
		return "wait"
	default:
		return "degrade"
	}
}

// addControlPort declares the runtime's control port (/status, /metrics) as the named container
// port monitors scrape, unless the user's template already declares that number or name.
func addControlPort(c *corev1.Container) {
	for _, p := range c.Ports {
		if p.ContainerPort == nezhav1.ControlPort || p.Name == nezhav1.ControlPortName {
			return
		}
	}
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: nezhav1.ControlPortName, ContainerPort: nezhav1.ControlPort, Protocol: corev1.ProtocolTCP})
}
