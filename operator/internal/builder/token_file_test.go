package builder_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
)

// TestTokenIsAMountedFileNotAnEnvVariable: every container gets the token Secret read-only at
// the directory of NEZHA_JOB_TOKEN_FILE (an env variable would be inherited by every child
// process); a user's volume or mount of the same name cannot replace or widen it.
func TestTokenIsAMountedFileNotAnEnvVariable(t *testing.T) {
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: "nezha-job-token", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		Containers: []corev1.Container{
			{Name: "a", VolumeMounts: []corev1.VolumeMount{{Name: "nezha-job-token", MountPath: "/elsewhere"}}},
			{Name: "b"},
		},
	}}
	in := builder.Injection{TokenSecret: "j-token", Env: []corev1.EnvVar{{Name: nezhav1.EnvJobTokenFile, Value: builder.TokenFilePath}}}
	if err := builder.InjectTemplate(&tmpl, in); err != nil {
		t.Fatal(err)
	}
	var vols []corev1.Volume
	for _, v := range tmpl.Spec.Volumes {
		if v.Name == "nezha-job-token" {
			vols = append(vols, v)
		}
	}
	if len(vols) != 1 || vols[0].Secret == nil || vols[0].Secret.SecretName != "j-token" ||
		len(vols[0].Secret.Items) != 1 || vols[0].Secret.Items[0].Key != nezhav1.JobTokenKey || *vols[0].Secret.DefaultMode != 0o440 {
		t.Fatalf("token volumes %+v", vols)
	}
	for _, c := range tmpl.Spec.Containers {
		if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/var/run/nezha/job-token" || !c.VolumeMounts[0].ReadOnly {
			t.Errorf("container %s mounts %+v", c.Name, c.VolumeMounts)
		}
		for _, e := range c.Env {
			if e.Name == nezhav1.EnvJobToken {
				t.Errorf("container %s has %s", c.Name, e.Name)
			}
		}
	}
	if builder.TokenFilePath != "/var/run/nezha/job-token/token" {
		t.Errorf("TokenFilePath %q", builder.TokenFilePath)
	}
}
