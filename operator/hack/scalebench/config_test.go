package main

import (
	"testing"

	"github.com/nezha-project/nezha/operator/pkg/config"
)

// TestBenchConfiguresTheOperator: the file the bench hands the operator is one it accepts, and
// an --operator-config line replaces the bench's own key rather than duplicating it.
func TestBenchConfiguresTheOperator(t *testing.T) {
	c, err := config.Decode([]byte(operatorConfig("127.0.0.1:9999", []string{"workerPods: {createParallelism: 16}", "webhook: {port: 0, certDir: /x}"})))
	if err != nil {
		t.Fatal(err)
	}
	if c.Metrics.BindAddress != "127.0.0.1:9999" || *c.WorkerPods.CreateParallelism != 16 || *c.Webhook.Port != 0 || c.Webhook.CertDir != "/x" {
		t.Errorf("bench configuration %+v", c)
	}
}
