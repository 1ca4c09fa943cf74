package builder

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// The NCCL integration (spec.runtime.integration: nccl): NCCL loads libnccl-net-<NCCL_NET_PLUGIN>.so
// from the library path, and NCCL_NET picks the network by the plugin's name, which also makes
// a plugin that failed to start an error instead of a silent fallback to NCCL's own sockets.
const (
	ncclPluginName = "nezha"
	ncclLibDir     = runtimeMountPath + "/lib"
	// podNetworkInterface is the pod's primary interface: NCCL's bootstrap (rank discovery,
	// handle exchange) stays there, only the data path takes the rails.
	podNetworkInterface = "eth0"
	// cudaImageLibraryPath is what NVIDIA's CUDA base images put in LD_LIBRARY_PATH. Container
	// env replaces an image's ENV, so when the template does not set LD_LIBRARY_PATH itself the
	// plugin's directory is put in front of these rather than alone.
	cudaImageLibraryPath = "/usr/local/nvidia/lib:/usr/local/nvidia/lib64"
)

// addNCCLEnv sets the NCCL plugin variables on one container. NCCL_NET_PLUGIN and NCCL_NET are
// the contract (replaced); LD_LIBRARY_PATH keeps the template's own value after the plugin's
// directory; NCCL_SOCKET_IFNAME is only a default.
func addNCCLEnv(c *corev1.Container) {
	libPath := ncclLibDir + ":" + cudaImageLibraryPath
	socketIf := true
	for _, e := range c.Env {
		switch e.Name {
		case "LD_LIBRARY_PATH":
			if e.ValueFrom == nil && e.Value != "" {
				libPath = ncclLibDir + ":" + e.Value
			}
		case "NCCL_SOCKET_IFNAME":
			socketIf = false
		}
	}
	add := []corev1.EnvVar{
		{Name: "NEZHA_NCCL_CONTROL_ADDR", Value: ":" + strconv.Itoa(nezhav1.NCCLControlPort)},
		{Name: "NCCL_NET_PLUGIN", Value: ncclPluginName},
		{Name: "NCCL_NET", Value: ncclPluginName},
		{Name: "LD_LIBRARY_PATH", Value: libPath},
	}
	if socketIf {
		add = append(add, corev1.EnvVar{Name: "NCCL_SOCKET_IFNAME", Value: podNetworkInterface})
	}
	c.Env = mergeEnv(c.Env, add)
}

// addNCCLPort declares the plugin's endpoint as a named port (the chart's PodMonitor scrapes it
// by name), unless the template already uses that number or name.
func addNCCLPort(c *corev1.Container) {
	for _, p := range c.Ports {
		if p.ContainerPort == nezhav1.NCCLControlPort || p.Name == nezhav1.NCCLControlPortName {
			return
		}
	}
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: nezhav1.NCCLControlPortName, ContainerPort: nezhav1.NCCLControlPort, Protocol: corev1.ProtocolTCP})
}
