{{/* Common names and labels for the Nezha chart. */}}

{{- define "nezha.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "nezha.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: nezha
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "nezha.image" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $tag := default $root.Chart.AppVersion $root.Values.image.tag -}}
{{- if $root.Values.image.registry -}}
{{- printf "%s/%s:%s" $root.Values.image.registry $name $tag -}}
{{- else -}}
{{- printf "%s:%s" $name $tag -}}
{{- end -}}
{{- end -}}

{{- /* The operator's Configuration (templates/operator-config.yaml). */ -}}
{{- define "nezha.operatorConfig" -}}
{{- $op := .Values.operator -}}
apiVersion: config.nezha.io/v1alpha1
kind: Configuration
namespace: {{ .Release.Namespace | quote }}
watchNamespaces: {{ toJson (default (list) $op.watchNamespaces) }}
health:
  healthProbeBindAddress: ":{{ $op.healthPort }}"
metrics:
  bindAddress: ":{{ $op.metricsPort }}"
webhook:
  {{- if .Values.webhook.enabled }}
  port: {{ .Values.webhook.port }}
  certDir: /etc/nezha/webhook
  {{- else }}
  port: 0
  {{- end }}
leaderElection:
  leaderElect: {{ $op.leaderElection }}
  resourceNamespace: {{ $op.leaderElectionNamespace | quote }}
runtime:
  image: {{ include "nezha.image" (list . $op.runtimeImage) | quote }}
  transports: {{ toJson $op.runtimeTransports }}
runtimeControl:
  probe: {{ $op.runtimeControl.probe }}
  probeTimeout: {{ $op.runtimeControl.probeTimeout | quote }}
  steerRails: {{ $op.runtimeControl.steerRails }}
  railActionInterval: {{ $op.runtimeControl.railActionInterval | quote }}
quarantine:
  failures: {{ $op.quarantine.failures }}
  window: {{ $op.quarantine.window | quote }}
  releaseAfter: {{ $op.quarantine.releaseAfter | quote }}
railNodes:
  staleAfter: {{ $op.railNodeStaleAfter | quote }}
networkPolicy:
  enabled: {{ .Values.networkPolicy.enabled }}
  monitoringNamespace: {{ .Values.networkPolicy.monitoringNamespace | quote }}
  operatorPodLabels:
    app.kubernetes.io/instance: {{ .Release.Name | quote }}
    app.kubernetes.io/component: operator
workerPods:
  eventBatch: {{ $op.podEventBatch | quote }}
  createParallelism: {{ $op.createParallelism }}
{{- end -}}

{{- /*
nezha.operatorRules: the generated operator rules split one resource per rule, keeping those
whose resource is in .only (keep true) or those whose resource is not (keep false).
*/ -}}
{{- define "nezha.operatorRules" -}}
{{- range $r := .rules }}
{{- range $res := $r.resources }}
{{- if eq (has $res $.only) $.keep }}
  - apiGroups: {{ toJson $r.apiGroups }}
    resources: [{{ $res | quote }}]
    verbs: {{ toJson $r.verbs }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- /*
nezha.agentNamespace: where the rail agent runs. Its pods need hostNetwork and hostPath, which
only Pod Security "privileged" admits, so it gets a namespace of its own and the release
namespace can enforce "restricted" (docs/install.md "Pod Security").
*/ -}}
{{- define "nezha.agentNamespace" -}}
{{- default (printf "%s-rail-agent" .Release.Namespace) .Values.agent.namespace.name -}}
{{- end -}}

{{- /* nezha.webhookCertSecret: the Secret holding the webhook's serving certificate (tls.crt, tls.key). */ -}}
{{- define "nezha.webhookCertSecret" -}}
{{- $c := .Values.webhook.certificates -}}
{{- if eq $c.mode "existingSecret" -}}
{{- required "webhook.certificates.existingSecret.name is required when webhook.certificates.mode is existingSecret" $c.existingSecret.name -}}
{{- else -}}
{{- printf "%s-webhook-cert" (include "nezha.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- /*
nezha.hasAdmissionPolicy: non-empty where the API server serves admissionregistration.k8s.io/v1
ValidatingAdmissionPolicy (Kubernetes 1.30+). `helm template` knows only what --api-versions
says; helm install and Argo CD ask the cluster.
*/ -}}
{{- define "nezha.hasAdmissionPolicy" -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy" -}}true{{- end -}}
{{- end -}}
