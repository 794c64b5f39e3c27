{{/*
The pod template of a role (dict "root" $ "role" ROLE "args" LIST "portName" NAME "port" NUMBER "dataDir"
BOOL "claim" BOOL; claim: the data dir is the StatefulSet's claim, not an emptyDir): one container, ragbus with the role's arguments, its settings from the ConfigMap, its
credentials from the Secrets, probes on the port's /health and /ready.
*/}}
{{- define "ragbus.pod" -}}
{{- $v := .root.Values -}}
{{- $role := index $v .role -}}
{{- $secret := include "ragbus.secretName" .root -}}
metadata:
  labels:
    {{- include "ragbus.selector" . | nindent 4 }}
  annotations:
    # A change of the settings rolls the pods.
    checksum/settings: {{ include "ragbus.settings" (dict "root" .root "role" .role) | sha256sum }}
    {{- if and (ne .role "gateway") $v.metrics.annotations }}
    prometheus.io/scrape: "true"
    prometheus.io/port: {{ $v.metrics.port | quote }}
    prometheus.io/path: /metrics
    {{- end }}
    {{- with $role.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  # ragbus needs nothing of the Kubernetes API, nor the Services' variables in its environment.
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: {{ $role.terminationGracePeriodSeconds }}
  securityContext:
    {{- toYaml $v.podSecurityContext | nindent 4 }}
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: ragbus
      image: "{{ $v.image.repository }}:{{ $v.image.tag }}"
      imagePullPolicy: {{ $v.image.pullPolicy }}
      command:
        {{- toYaml (concat $v.image.command .args) | nindent 8 }}
      env:
        - name: RAGBUS_CONFIG
          value: /etc/ragbus/settings/{{ .role }}.toml
        {{- if .dataDir }}
        - name: RAGBUS_DATA_DIR
          value: /var/lib/ragbus
        {{- end }}
        {{- if and (eq .role "query") (include "ragbus.shards" .root | int) }}
        # This host's id among the shards' owners: the pod's name, which a StatefulSet keeps for it.
        - name: RAGBUS_PROCESSORS__SHARD_HOST__HOST_ID
          valueFrom:
            fieldRef: {fieldPath: metadata.name}
        {{- end }}
        {{- if and (eq .role "gateway") (or $v.secrets.apiKeys (and $v.secrets.existingSecret (not $v.gateway.insecure))) }}
        - name: RAGBUS_API_KEYS
          valueFrom:
            secretKeyRef: {name: {{ $secret }}, key: api-keys}
        {{- end }}
        {{- if include "ragbus.kafkaSasl" .root }}
        - name: RAGBUS_BUS__KAFKA__SASL_PLAIN_USERNAME
          valueFrom:
            secretKeyRef: {name: {{ $secret }}, key: kafka-username}
        - name: RAGBUS_BUS__KAFKA__SASL_PLAIN_PASSWORD
          valueFrom:
            secretKeyRef: {name: {{ $secret }}, key: kafka-password}
        {{- end }}
        {{- if include "ragbus.pulsarToken" .root }}
        - name: RAGBUS_BUS__PULSAR__AUTH_TOKEN
          valueFrom:
            secretKeyRef: {name: {{ $secret }}, key: pulsar-token}
        {{- end }}
        {{- with $role.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: {{ .portName }}
          containerPort: {{ .port }}
          protocol: TCP
      # /health answers while the process serves HTTP; /ready once it serves: a gateway once the
      # pipeline answers, a worker once every processor joined its topic (a query host: once its
      # replica caught up with the log), and neither while it drains.
      startupProbe:
        httpGet: {path: /health, port: {{ .portName }}}
        periodSeconds: 2
        failureThreshold: 60
      livenessProbe:
        httpGet: {path: /health, port: {{ .portName }}}
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: 3
      readinessProbe:
        httpGet: {path: /ready, port: {{ .portName }}}
        periodSeconds: 5
        timeoutSeconds: 5
        failureThreshold: 2
      resources:
        {{- toYaml $role.resources | nindent 8 }}
      securityContext:
        {{- toYaml $v.securityContext | nindent 8 }}
      volumeMounts:
        - {name: settings, mountPath: /etc/ragbus/settings, readOnly: true}
        - {name: tmp, mountPath: /tmp}
        {{- if .dataDir }}
        - {name: data, mountPath: /var/lib/ragbus}
        {{- end }}
        {{- if include "ragbus.tls" .root }}
        - {name: tls, mountPath: /etc/ragbus/tls, readOnly: true}
        {{- end }}
  volumes:
    - name: settings
      configMap:
        name: {{ include "ragbus.fullname" .root }}-settings
        items:
          - {key: {{ .role }}.toml, path: {{ .role }}.toml}
    - name: tmp
      emptyDir: {}
    {{- if and .dataDir (not .claim) }}
    - name: data
      {{- with (dig "storage" "sizeLimit" "" $role) }}
      emptyDir: {sizeLimit: {{ . }}}
      {{- else }}
      emptyDir: {}
      {{- end }}
    {{- end }}
    {{- if include "ragbus.tls" .root }}
    - name: tls
      secret:
        secretName: {{ include "ragbus.tlsSecretName" .root }}
    {{- end }}
  {{- with $role.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $role.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $role.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* A role's PodDisruptionBudget. */}}
{{- define "ragbus.pdb" -}}
{{- $role := index .root.Values .role -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "ragbus.fullname" .root }}-{{ .role }}
  labels:
    {{- include "ragbus.labels" . | nindent 4 }}
spec:
  selector:
    matchLabels:
      {{- include "ragbus.selector" . | nindent 6 }}
  {{- toYaml $role.pdb | nindent 2 }}
{{- end -}}
