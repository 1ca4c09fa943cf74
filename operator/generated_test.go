// Package operator_test checks that generated files match the Go types they come from.
package operator_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedFilesAreFresh regenerates deepcopy code, CRDs and RBAC into a temp dir with the
// same script `make manifests` runs and fails if anything in the tree differs: a changed marker
// or type without `make manifests` must not reach main.
func TestGeneratedFilesAreFresh(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	crd, rbac, obj := filepath.Join(tmp, "crd"), filepath.Join(tmp, "rbac"), filepath.Join(tmp, "obj")
	cmd := exec.Command(filepath.Join(root, "operator", "hack", "manifests.sh"), crd, rbac, obj)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("manifests.sh: %v\n%s", err, out)
	}
	pairs := map[string]string{
		filepath.Join(obj, "v1alpha1", "zz_generated.deepcopy.go"):           filepath.Join(root, "operator", "api", "v1alpha1", "zz_generated.deepcopy.go"),
		filepath.Join(obj, "config", "v1alpha1", "zz_generated.deepcopy.go"): filepath.Join(root, "operator", "api", "config", "v1alpha1", "zz_generated.deepcopy.go"),
		filepath.Join(rbac, "role.yaml"):                                     filepath.Join(root, "config", "rbac", "role.yaml"),
	}
	generated, err := os.ReadDir(crd)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range generated {
		pairs[filepath.Join(crd, f.Name())] = filepath.Join(root, "config", "crd", "bases", f.Name())
	}
	committed, err := os.ReadDir(filepath.Join(root, "config", "crd", "bases"))
	if err != nil {
		t.Fatal(err)
	}
	if len(committed) != len(generated) {
		t.Errorf("config/crd/bases has %d files, generation gives %d: run make manifests", len(committed), len(generated))
	}
	for fresh, inTree := range pairs {
		want, err := os.ReadFile(fresh)
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(inTree)
		if err != nil {
			t.Errorf("%s: %v (run make manifests)", inTree, err)
			continue
		}
		if !bytes.Equal(want, have) {
			t.Errorf("%s is stale: run make manifests", inTree)
		}
	}
}

// TestKustomizationsBuild renders config/crd and config/rbac with kubectl's built-in kustomize
// (kubectl from KUBEBUILDER_ASSETS), so a renamed generated file cannot break them unnoticed.
func TestKustomizationsBuild(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set (it holds kubectl)")
	}
	root, _ := filepath.Abs("..")
	for dir, kinds := range map[string]int{"config/crd": 3, "config/rbac": 5} {
		out, err := exec.Command(filepath.Join(assets, "kubectl"), "kustomize", filepath.Join(root, dir)).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
		}
		if n := bytes.Count(out, []byte("\nkind: ")) + boolInt(bytes.HasPrefix(out, []byte("kind: "))); n != kinds {
			t.Errorf("%s renders %d objects, want %d", dir, n, kinds)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
