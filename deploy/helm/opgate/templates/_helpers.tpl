{{- define "opgate.labels" -}}
app.kubernetes.io/name: opgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "opgate.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{- define "opgate.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65534
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- define "opgate.nodeEnv" -}}
- name: HOME
  value: /tmp
{{- if .Values.requireGpu }}
- name: OPGATE_REQUIRE_GPU  # opgate serve --require-gpu: a pod that sees no GPU fails, not passes on skips
  value: "1"
{{- end }}
{{- if .Values.nodeLabeller.enabled }}
- name: OPGATE_LABEL_NODE
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
{{- end }}
{{- end -}}

{{- define "opgate.probePod" -}}
restartPolicy: Never
serviceAccountName: opgate
runtimeClassName: {{ .root.Values.runtimeClassName }}
nodeSelector:
  kubernetes.io/hostname: {{ .node | quote }}
tolerations:
  {{- toYaml .root.Values.tolerations | nindent 2 }}
containers:
  - name: opgate
    image: {{ include "opgate.image" .root }}
    imagePullPolicy: {{ .root.Values.image.pullPolicy }}
    args: ["serve", "--once", "standard"]
    env:
      {{- include "opgate.nodeEnv" .root | nindent 6 }}
    resources:
      requests:
        nvidia.com/gpu: {{ .root.Values.standardJob.gpusPerNode }}
        {{- toYaml .root.Values.standardJob.resources.requests | nindent 8 }}
      limits:
        nvidia.com/gpu: {{ .root.Values.standardJob.gpusPerNode }}
        {{- toYaml .root.Values.standardJob.resources.limits | nindent 8 }}
    securityContext:
      {{- include "opgate.securityContext" .root | nindent 6 }}
    volumeMounts:
      - name: tmp
        mountPath: /tmp
volumes:
  - name: tmp
    emptyDir: {}
{{- end -}}
