package builder

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// The job token reaches the runtime as a file on a read-only Secret volume, named by
// NEZHA_JOB_TOKEN_FILE, not as an environment variable: every child process of a worker inherits
// its environment (and /proc/<pid>/environ of each of them shows it), while the file is read
// once by the runtime and readable only by the pod's user (docs/security.md "Job token").
const (
	tokenVolumeName = "nezha-job-token"
	tokenMountDir   = "/var/run/nezha/job-token"
	// TokenFilePath is NEZHA_JOB_TOKEN_FILE: the file holds the token alone.
	TokenFilePath = tokenMountDir + "/" + nezhav1.JobTokenKey
)

// mountToken adds the Secret volume holding the token (key JobTokenKey only, mode 0440) and
// mounts it read-only into every container of spec; a user's own volume or mount of that name
// is replaced so the contract cannot be broken by accident.
func mountToken(spec *corev1.PodSpec, secretName string) {
	vol := corev1.Volume{Name: tokenVolumeName, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName:  secretName,
		Items:       []corev1.KeyToPath{{Key: nezhav1.JobTokenKey, Path: nezhav1.JobTokenKey}},
		DefaultMode: ptr.To(int32(0o440)),
	}}}
	spec.Volumes = append(withoutVolume(spec.Volumes, tokenVolumeName), vol)
	for i := range spec.Containers {
		c := &spec.Containers[i]
		mounts := c.VolumeMounts[:0:0]
		for _, m := range c.VolumeMounts {
			if m.Name != tokenVolumeName {
				mounts = append(mounts, m)
			}
		}
		c.VolumeMounts = append(mounts, corev1.VolumeMount{Name: tokenVolumeName, MountPath: tokenMountDir, ReadOnly: true})
	}
}

func withoutVolume(vols []corev1.Volume, name string) []corev1.Volume {
	kept := vols[:0:0]
	for _, v := range vols {
		if v.Name != name {
			kept = append(kept, v)
		}
	}
	return kept
}
