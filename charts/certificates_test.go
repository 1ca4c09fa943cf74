package charts

import (
	"encoding/base64"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A CA certificate the existingSecret tests hand the chart (its content is only passed through).
const testCAPEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"

// webhookCABundles returns each webhook configuration's caBundle (empty: none) and its
// cert-manager.io/inject-ca-from annotation.
func webhookCABundles(t *testing.T, objs []*unstructured.Unstructured) (bundles, inject []string) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "ValidatingWebhookConfiguration" && o.GetKind() != "MutatingWebhookConfiguration" {
			continue
		}
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, h := range hooks {
			b, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "caBundle")
			bundles = append(bundles, b)
		}
		inject = append(inject, o.GetAnnotations()["cert-manager.io/inject-ca-from"])
	}
	if len(bundles) != 2 {
		t.Fatalf("want the validating and the mutating webhook, got %d webhooks", len(bundles))
	}
	return bundles, inject
}

func operatorCertVolume(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	vols, _, _ := unstructured.NestedSlice(byKind(objs, "Deployment")[0].Object, "spec", "template", "spec", "volumes")
	for _, v := range vols {
		if name, _, _ := unstructured.NestedString(v.(map[string]any), "name"); name == "webhook-cert" {
			s, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName")
			return s
		}
	}
	t.Fatal("the operator mounts no webhook-cert volume")
	return ""
}

// TestWebhookCertificatesFromCertManagerOrAnExistingSecretRenderStably: GitOps deployers render
// with `helm template` on every sync; with cert-manager or an existing Secret two renders are
// byte-identical (no certificate made at render time), the webhooks trust the right CA and the
// operator mounts the right Secret. The self-signed default is not stable (documented).
func TestWebhookCertificatesFromCertManagerOrAnExistingSecretRenderStably(t *testing.T) {
	caBundle := base64.StdEncoding.EncodeToString([]byte(testCAPEM))
	modes := map[string][]string{
		"certManager": {"--set", "webhook.certificates.mode=certManager"},
		"certManager with an issuer": {"--set", "webhook.certificates.mode=certManager",
			"--set", "webhook.certificates.certManager.issuerRef.name=corp-ca", "--set", "webhook.certificates.certManager.issuerRef.kind=ClusterIssuer"},
		"existingSecret": {"--set", "webhook.certificates.mode=existingSecret",
			"--set", "webhook.certificates.existingSecret.name=corp-webhook-tls", "--set", "webhook.certificates.existingSecret.caBundle=" + caBundle},
	}
	for name, set := range modes {
		args := append([]string{"template", releaseName, chartDir, "--kube-version", kubeVersion, "--namespace", releaseNamespace}, set...)
		first, second := runHelm(t, args...), runHelm(t, args...)
		if first != second {
			t.Errorf("%s: two helm template runs differ", name)
		}
		objs := renderedObjects(t, first)
		for _, s := range byKind(objs, "Secret") {
			if strings.Contains(s.GetName(), "webhook") {
				t.Errorf("%s: the chart renders Secret %s (the certificate is not the chart's to make)", name, s.GetName())
			}
		}
		bundles, inject := webhookCABundles(t, objs)
		switch name {
		case "existingSecret":
			if bundles[0] != caBundle || bundles[1] != caBundle || inject[0] != "" {
				t.Errorf("existingSecret: caBundles %v, inject %v; want the given CA and no injection", bundles, inject)
			}
			if v := operatorCertVolume(t, objs); v != "corp-webhook-tls" {
				t.Errorf("existingSecret: the operator mounts %q", v)
			}
		default:
			if bundles[0] != "" || bundles[1] != "" || inject[0] != releaseNamespace+"/nezha-webhook-cert" || inject[1] != inject[0] {
				t.Errorf("%s: caBundles %v, inject-ca-from %v; want none and the Certificate", name, bundles, inject)
			}
			certs := byKind(objs, "Certificate")
			if len(certs) != 1 || operatorCertVolume(t, objs) != "nezha-webhook-cert" {
				t.Fatalf("%s: want one Certificate whose Secret the operator mounts, got %d", name, len(certs))
			}
			dns, _, _ := unstructured.NestedStringSlice(certs[0].Object, "spec", "dnsNames")
			issuer, _, _ := unstructured.NestedString(certs[0].Object, "spec", "issuerRef", "name")
			if len(dns) == 0 || dns[0] != "nezha-operator-webhook."+releaseNamespace+".svc" {
				t.Errorf("%s: dnsNames %v lack the webhook Service", name, dns)
			}
			wantIssuer, wantIssuers := "nezha-webhook-selfsigned", 1
			if strings.Contains(name, "issuer") {
				wantIssuer, wantIssuers = "corp-ca", 0
			}
			if issuer != wantIssuer || len(byKind(objs, "Issuer")) != wantIssuers {
				t.Errorf("%s: issuer %q and %d Issuers rendered, want %q and %d", name, issuer, len(byKind(objs, "Issuer")), wantIssuer, wantIssuers)
			}
		}
	}
	selfSigned := []string{"template", releaseName, chartDir, "--kube-version", kubeVersion, "--namespace", releaseNamespace}
	if runHelm(t, selfSigned...) == runHelm(t, selfSigned...) {
		t.Errorf("selfSigned renders identically twice: then it need not be documented as not GitOps-stable")
	}
}

// TestWebhookCertificateValuesAreChecked: a missing or malformed existing-Secret setting or an
// unknown mode fails the render naming the value.
func TestWebhookCertificateValuesAreChecked(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"webhook.certificates.mode=vault"}, "mode"},
		{[]string{"webhook.certificates.mode=existingSecret", "webhook.certificates.existingSecret.caBundle=" +
			base64.StdEncoding.EncodeToString([]byte(testCAPEM))}, "existingSecret.name"},
		{[]string{"webhook.certificates.mode=existingSecret", "webhook.certificates.existingSecret.name=tls"}, "caBundle"},
		{[]string{"webhook.certificates.mode=existingSecret", "webhook.certificates.existingSecret.name=tls",
			"webhook.certificates.existingSecret.caBundle=" + base64.StdEncoding.EncodeToString([]byte("not a certificate"))},
			"existingSecret.caBundle must be a PEM certificate"},
		{[]string{"webhook.certificates.existingSecret.name=Bad_Name"}, "name"},
	} {
		args := []string{"template", releaseName, chartDir, "--kube-version", kubeVersion, "--namespace", releaseNamespace}
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		out, err := helmOutput(t, args...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("--set %v: want an error naming %q, got %v:\n%s", tc.set, tc.want, err, out)
		}
	}
}
