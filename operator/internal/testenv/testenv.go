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

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/nezha-project/nezha/operator/internal/scheme"
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
	return &envtest.Environment{
		CRDDirectoryPaths:     paths,
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		Scheme:                Scheme(),
	}, nil
}
