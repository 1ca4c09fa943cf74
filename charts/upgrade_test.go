package charts

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestUpgradeKeepsTheWebhookCertificate installs the chart with the real helm into a real API
// server, upgrades it, and checks the webhook's CA and serving certificate survive the upgrade: a
// new pair on every upgrade put the new CA into caBundle at once while the running operator still
// served the old certificate, and every RailClass admission failed until the kubelet refreshed the
// operator's volume (seen on kind). Deleting the Secret is the documented way to rotate.
func TestUpgradeKeepsTheWebhookCertificate(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run through `make test` (hack/setup.sh builds the binaries)")
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(chartDir, "crds")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kubeconfigPath := kubeconfigFor(t, env, cfg)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	helm := func(verb string) {
		runHelm(t, verb, releaseName, chartDir, "--kubeconfig", kubeconfigPath, "--namespace", releaseNamespace, "--create-namespace")
	}
	// current returns the Secret's CA and certificate and the validating webhook's caBundle.
	current := func() (ca, cert, bundle []byte) {
		t.Helper()
		var s corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: releaseName + "-webhook-cert"}, &s); err != nil {
			t.Fatal(err)
		}
		var vwcs admissionv1.ValidatingWebhookConfigurationList
		if err := c.List(ctx, &vwcs); err != nil || len(vwcs.Items) != 1 || len(vwcs.Items[0].Webhooks) == 0 {
			t.Fatalf("want one validating webhook configuration: %v %v", err, vwcs.Items)
		}
		return s.Data["ca.crt"], s.Data["tls.crt"], vwcs.Items[0].Webhooks[0].ClientConfig.CABundle
	}

	helm("install")
	ca, cert, bundle := current()
	if len(ca) == 0 || len(cert) == 0 || !bytes.Equal(ca, bundle) {
		t.Fatalf("after install: the Secret's ca.crt (%d bytes) must be the caBundle (%d bytes)", len(ca), len(bundle))
	}
	helm("upgrade")
	ca2, cert2, bundle2 := current()
	if !bytes.Equal(ca, ca2) || !bytes.Equal(cert, cert2) || !bytes.Equal(bundle, bundle2) {
		t.Fatal("helm upgrade replaced the webhook CA or certificate")
	}

	var s corev1.Secret
	s.Name, s.Namespace = releaseName+"-webhook-cert", releaseNamespace
	if err := c.Delete(ctx, &s); err != nil {
		t.Fatal(err)
	}
	helm("upgrade")
	ca3, cert3, bundle3 := current()
	if bytes.Equal(ca3, ca) || bytes.Equal(cert3, cert) || !bytes.Equal(ca3, bundle3) {
		t.Fatal("after deleting the Secret, an upgrade must make a new pair and put its CA into caBundle")
	}
}
