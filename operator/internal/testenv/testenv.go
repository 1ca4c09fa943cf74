// Package testenv starts a real kube-apiserver and etcd (controller-runtime envtest) with every
// CRD the operator talks to: Nezha's own from config/crd/bases, the Multus
// NetworkAttachmentDefinition and Kubeflow PyTorchJob CRDs read from their Go modules, so the
// schemas tested are the ones shipped, never hand-written copies.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/nezha-project/nezha/operator/internal/scheme"
	"github.com/nezha-project/nezha/operator/internal/webhook"
)

// Module paths and files of the third-party CRDs (versions come from go.mod).
const (
	nadModule         = "github.com/k8snetworkplumbingwg/network-attachment-definition-client"
	nadCRDFile        = "artifacts/networks-crd.yaml"
	trainingModule    = "github.com/kubeflow/training-operator"
	pytorchJobCRDFile = "manifests/base/crds/kubeflow.org_pytorchjobs.yaml"
)

// Scheme knows every type the operator uses.
func Scheme() *k8sruntime.Scheme { return scheme.New() }

// RepoRoot is the repository root, found from this file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// ModuleDir returns where the Go module cache holds module (at the version go.mod selects).
func ModuleDir(module string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("module %s is not downloaded (run go mod download)", module)
	}
	return dir, nil
}

// Options selects optional CRDs.
type Options struct {
	// WithoutPyTorchJob leaves the Kubeflow CRD out (to test the operator without it).
	WithoutPyTorchJob bool
	// WithWebhooks registers the operator's admission webhooks with the apiserver (envtest makes
	// the serving certificate; serve them with WebhookServer).
	WithWebhooks bool
}

// New returns an envtest environment ready to Start. It fails when KUBEBUILDER_ASSETS does not
// point at kube-apiserver and etcd.
func New(o Options) (*envtest.Environment, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: point it at the kube-apiserver/etcd built by `make setup` (~/.cache/nezha/kube-<version>/bin)")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("KUBEBUILDER_ASSETS=%s: %w", assets, err)
		}
	}
	paths := []string{filepath.Join(RepoRoot(), "config", "crd", "bases")}
	nadDir, err := ModuleDir(nadModule)
	if err != nil {
		return nil, err
	}
	paths = append(paths, filepath.Join(nadDir, nadCRDFile))
	if !o.WithoutPyTorchJob {
		tDir, err := ModuleDir(trainingModule)
		if err != nil {
			return nil, err
		}
		paths = append(paths, filepath.Join(tDir, pytorchJobCRDFile))
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     paths,
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		Scheme:                Scheme(),
	}
	if o.WithWebhooks {
		env.WebhookInstallOptions.ValidatingWebhooks = []*admissionregistrationv1.ValidatingWebhookConfiguration{
			RailClassWebhookConfiguration(),
		}
	}
	return env, nil
}

// RailClassWebhookConfiguration is the same registration the chart installs
// (charts/nezha/templates/webhook.yaml); envtest points it at the test's webhook server.
func RailClassWebhookConfiguration() *admissionregistrationv1.ValidatingWebhookConfiguration {
	path := webhook.RailClassPath
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "nezha-operator"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "vrailclass.nezha.io",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			FailurePolicy:           &fail,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{Name: "nezha-operator-webhook", Namespace: "nezha-system", Path: &path},
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"nezha.io"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"railclasses"},
				},
			}},
		}},
	}
}
