package charts

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Pod specs users copy: every pod template in config/samples and in docs/install.md's YAML.
var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// podSpecsIn returns every map under v that has a "containers" list: a pod spec, however deep
// the custom resource nests it (MultiRailJob, PyTorchJob replicas, Trainer runtimes).
func podSpecsIn(v any) []map[string]any {
	var out []map[string]any
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["containers"].([]any); ok {
			return []map[string]any{x}
		}
		for _, c := range x {
			out = append(out, podSpecsIn(c)...)
		}
	case []any:
		for _, c := range x {
			out = append(out, podSpecsIn(c)...)
		}
	}
	return out
}

// TestSamplesAndDocsShowWorkersThatPassRestricted: a namespace for training can enforce Pod
// Security "restricted" only if the workers users copy from Nezha's samples and install guide,
// and the chart's Trainer runtime, comply; each of their pod specs is submitted as a pod (dry run) to a real API server enforcing
// it.
func TestSamplesAndDocsShowWorkersThatPassRestricted(t *testing.T) {
	sources := map[string]string{}
	samples, err := filepath.Glob("../config/samples/*.yaml")
	if err != nil || len(samples) == 0 {
		t.Fatalf("no samples (err %v)", err)
	}
	for _, f := range samples {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sources[filepath.Base(f)] = string(b)
	}
	doc, err := os.ReadFile("../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range yamlBlock.FindAllStringSubmatch(string(doc), -1) {
		sources[fmt.Sprintf("docs/install.md block %d", i)] = m[1]
	}
	// The chart's own Trainer runtime is a worker template too: its node pods run in the users'
	// training namespaces.
	sources["chart templates/trainer-runtime.yaml"] = runHelm(t, "template", releaseName, chartDir, "--kube-version", kubeVersion,
		"--show-only", "templates/trainer-runtime.yaml", "--set", "trainer.enabled=true", "--set", "trainer.image=train:1")
	_, _, c := startAPIServer(t, "")
	createPSANamespace(t, c, "training", "restricted")
	checked := 0
	for name, text := range sources {
		for _, o := range renderedObjects(t, text) {
			for i, spec := range podSpecsIn(o.Object) {
				pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "spec": spec}}
				pod.SetName(fmt.Sprintf("%s-%d", strings.ToLower(o.GetName()), i))
				pod.SetNamespace("training")
				if err := c.Create(context.Background(), pod, client.DryRunAll); err != nil {
					t.Errorf("%s: %s %s pod template %d: %v", name, o.GetKind(), o.GetName(), i, err)
				}
				checked++
			}
		}
	}
	if checked < 5 {
		t.Fatalf("only %d pod templates found in the samples and docs/install.md", checked)
	}
}
