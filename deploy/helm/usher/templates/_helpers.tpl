{{/* Names and labels of every object of the chart. */}}

{{- define "usher.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "usher.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "usher.selectorLabels" -}}
app.kubernetes.io/name: {{ include "usher.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The replicas' pods: the selector's labels, by which the Deployment, the
Service, the PodDisruptionBudget and the spread constraints select them
(as in the chart's first release: the Deployment's selector is immutable,
and a Service whose selector changed would route to no pod until a new
replica is ready), and their component. The migration Job's pods carry
not the selector's labels but the instance, part-of and component
migrate, so that nothing selects them. */}}
{{- define "usher.serverLabels" -}}
{{ include "usher.selectorLabels" . }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "usher.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "usher.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "usher.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "usher.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image: repository@digest, or repository:tag. The tag defaults to
"v" and the appVersion, the release's tag as `make image` names it, when
the chart is of a release; a chart between releases (appVersion with a
pre-release, e.g. 0.2.0-dev) renders configuration keys that no released
binary takes, so it requires image.tag (or image.digest). */}}
{{- define "usher.image" -}}
{{- $img := .Values.image -}}
{{- if eq $img.tag "latest" -}}
{{- fail "image.tag: latest is refused, it names no particular build: give a release's tag (v1.2.3), the tag of your own build (`make image-ref` prints it), or image.digest" -}}
{{- end -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else if $img.tag -}}
{{- printf "%s:%s" $img.repository $img.tag -}}
{{- else if contains "-" .Chart.AppVersion -}}
{{- fail (printf "image.tag is required: this chart is of Usher %s, not of a release, and writes configuration only a binary built from the same commit takes; set image.tag to the tag `make image` gave such a build (`make image-ref` prints it), or image.digest" .Chart.AppVersion) -}}
{{- else -}}
{{- printf "%s:v%s" $img.repository .Chart.AppVersion -}}
{{- end -}}
{{- end -}}

{{/* Where the configuration and the data are mounted in the container. */}}
{{- define "usher.configDir" -}}/etc/usher{{- end -}}
{{- define "usher.dataDir" -}}/data{{- end -}}

{{/*
usher.yaml: the configuration `usher serve` and `usher migrate` read.
Secrets are not in it: they come from the environment (usher.env).
*/}}
{{- define "usher.config" -}}
{{- include "usher.validate" . -}}
{{- $u := .Values.usher -}}
{{- if not $u.publicURL -}}
{{- fail "usher.publicURL is required: the https URL Usher is reached at" -}}
{{- end -}}
{{- $server := dict "addr" (printf "0.0.0.0:%d" (int $u.port)) "public_url" $u.publicURL "data_dir" (include "usher.dataDir" .) "shutdown_timeout" (printf "%ds" (int $u.shutdownTimeoutSeconds)) "shutdown_delay" (printf "%ds" (int $u.shutdownDelaySeconds)) -}}
{{- with $u.trustedProxies }}{{ $_ := set $server "trusted_proxies" . }}{{ end -}}
{{- with int .Values.metrics.port }}{{ $_ := set $server "metrics_addr" (printf "0.0.0.0:%d" .) }}{{ end -}}
{{- $cfg := dict "server" $server "log" (dict "level" $u.log.level "format" $u.log.format) -}}
{{- if $u.identity.issuer -}}
{{- $id := dict "issuer" $u.identity.issuer -}}
{{- with $u.identity.audiences }}{{ $_ := set $id "audiences" . }}{{ end -}}
{{- with $u.identity.requiredScopes }}{{ $_ := set $id "required_scopes" . }}{{ end -}}
{{- with $u.identity.tenants }}{{ $_ := set $id "tenants" . }}{{ end -}}
{{- $_ := set $cfg "identity" $id -}}
{{- else if not $u.developmentSignIn -}}
{{- fail "usher.identity.issuer is required (or usher.developmentSignIn: true, which signs in anyone, for a trial)" -}}
{{- end -}}
{{- if $u.web.clientID -}}
{{- $web := dict "client_id" $u.web.clientID -}}
{{- with $u.web.scopes }}{{ $_ := set $web "scopes" . }}{{ end -}}
{{- $_ := set $cfg "web" $web -}}
{{- end -}}
{{- $model := dict "provider" $u.model.provider -}}
{{- with $u.model.baseURL }}{{ $_ := set $model "base_url" . }}{{ end -}}
{{- with $u.model.name }}{{ $_ := set $model "name" . }}{{ end -}}
{{- with $u.model.models }}{{ $_ := set $model "models" . }}{{ end -}}
{{- $_ := set $cfg "model" $model -}}
{{- with $u.database.maxConns }}{{ $_ := set $cfg "database" (dict "max_conns" .) }}{{ end -}}
{{- $policy := dict -}}
{{- if .Values.policy }}{{ $_ := set $policy "file" (printf "%s/policy.cedar" (include "usher.configDir" .)) }}{{ end -}}
{{- if .Values.toolLock }}{{ $_ := set $policy "lock_file" (printf "%s/tools.lock" (include "usher.configDir" .)) }}{{ end -}}
{{- with $policy }}{{ $_ := set $cfg "policy" . }}{{ end -}}
{{- with $u.review.groups }}{{ $_ := set $cfg "review" (dict "groups" .) }}{{ end -}}
{{- $admin := dict "heartbeat_interval" $u.admin.heartbeatInterval -}}
{{- with $u.admin.groups }}{{ $_ := set $admin "groups" . }}{{ end -}}
{{- $_ := set $cfg "admin" $admin -}}
{{- $audit := dict "checkpoint_interval" $u.audit.checkpointInterval -}}
{{- if $u.audit.sinks -}}
{{- $sinks := list -}}
{{- range $i, $s := $u.audit.sinks -}}
{{- if $s.webhook -}}
{{- $file := printf "%s/%s" (include "usher.sinkSecretDir" (dict "index" $i)) (default "secret" $s.webhook.secretKey) -}}
{{- $sinks = append $sinks (dict "name" $s.name "webhook" (dict "url" $s.webhook.url "secret_file" $file)) -}}
{{- else -}}
{{- $sinks = append $sinks (dict "name" $s.name "file" (dict "path" $s.file.path)) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $audit "sinks" $sinks -}}
{{- end -}}
{{- $_ := set $cfg "audit" $audit -}}
{{- $cfg = mergeOverwrite $cfg (deepCopy $u.extraConfig) -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/*
Refuses values the schema cannot judge alone, which `usher migrate` would
refuse in the Job, and values the chart would ignore: every problem at
once, each naming its value.
*/}}
{{- define "usher.validate" -}}
{{- $u := .Values.usher -}}
{{- $problems := list -}}
{{- if and $u.identity.issuer (not $u.identity.audiences) -}}
{{- $problems = append $problems "usher.identity.audiences: at least one audience is required with usher.identity.issuer (the API's client id and/or App ID URI)" -}}
{{- end -}}
{{- if and $u.identity.issuer (not $u.identity.requiredScopes) -}}
{{- $problems = append $problems "usher.identity.requiredScopes: the API's delegated scope (e.g. access_as_user) is required with usher.identity.issuer" -}}
{{- end -}}
{{- if and $u.identity.issuer $u.web.clientID (not $u.web.scopes) -}}
{{- $problems = append $problems "usher.web.scopes: the API's scope as the web client requests it (e.g. api://usher/access_as_user) is required with usher.web.clientID" -}}
{{- end -}}
{{- if eq $u.model.provider "openai" -}}
{{- if not $u.model.baseURL -}}
{{- $problems = append $problems "usher.model.baseURL is required with the openai provider" -}}
{{- end -}}
{{- if and (not $u.model.name) (not $u.model.models) -}}
{{- $problems = append $problems "usher.model.name is required with the openai provider: the model runs use (or usher.model.models, whose first is then the default)" -}}
{{- end -}}
{{- end -}}
{{- if and $u.model.name $u.model.models (not (has $u.model.name $u.model.models)) -}}
{{- $problems = append $problems (printf "usher.model.name (%s) must be one of usher.model.models" $u.model.name) -}}
{{- end -}}
{{- if and (not $u.identity.issuer) $u.developmentSignIn -}}
{{- /* It signs in anyone who types a user name: reached only through a
port forward, at a loopback URL, which its issuer (the public URL) is. */ -}}
{{- $public := urlParse $u.publicURL -}}
{{- if not (and (eq $public.scheme "http") (or (eq $public.hostname "localhost") (hasPrefix "127." $public.hostname) (eq $public.hostname "::1"))) -}}
{{- $problems = append $problems (printf "usher.publicURL (%s): usher.developmentSignIn signs in anyone who types a user name, so it is reached only through kubectl port-forward, at an http URL on loopback, e.g. http://127.0.0.1:8080; set usher.identity.issuer to serve people" $u.publicURL) -}}
{{- end -}}
{{- if .Values.ingress.enabled -}}
{{- $problems = append $problems "ingress.enabled: an Ingress would publish the development sign-in (usher.developmentSignIn); turn one of them off" -}}
{{- end -}}
{{- if ne .Values.service.type "ClusterIP" -}}
{{- $problems = append $problems (printf "service.type (%s) would publish the development sign-in (usher.developmentSignIn); use ClusterIP and kubectl port-forward" .Values.service.type) -}}
{{- end -}}
{{- end -}}
{{- $s := .Values.secrets -}}
{{- range $name := keys $s.values | sortAlpha -}}
{{- if and (index $s.values $name) (index $s $name).existingSecret -}}
{{- $problems = append $problems (printf "secrets.values.%s is given, and secrets.%s.existingSecret (%s) names the Secret it is read from, which the value would not reach: give one of them" $name $name (index $s $name).existingSecret) -}}
{{- end -}}
{{- end -}}
{{- with $problems -}}
{{- fail (printf "the values are refused:\n- %s" (join "\n- " .)) -}}
{{- end -}}
{{- end -}}

{{/* The files of the configuration's ConfigMap. */}}
{{- define "usher.configData" -}}
usher.yaml: |
{{- include "usher.config" . | nindent 2 }}
{{- with .Values.policy }}
policy.cedar: |
{{- . | nindent 2 }}
{{- end }}
{{- with .Values.toolLock }}
tools.lock: |
{{- . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The secrets as USHER_* variables. Each comes from its existingSecret, or
from the Secret the chart creates when it is given a value (named by the
argument's "created"), or else from the Secret named as the release's full
name, which the operator creates. The web client's secret is read when
web.client_id is set, the model's key (optionally) for the openai provider,
the previous key-encryption keys always, optionally (they are there only
while the key-encryption key is replaced).
*/}}
{{- define "usher.env" -}}
{{- $root := .root -}}
{{- $s := $root.Values.secrets -}}
{{- $creates := include "usher.createsSecret" $root -}}
{{- $u := $root.Values.usher -}}
{{- range $item := list (list "keyEncryptionKey" "USHER_BROKER_KEY_ENCRYPTION_KEY" true false) (list "databaseURL" "USHER_DATABASE_URL" true false) (list "oidcClientSecret" "USHER_WEB_CLIENT_SECRET" (not (empty $u.web.clientID)) false) (list "modelAPIKey" "USHER_MODEL_API_KEY" (eq $u.model.provider "openai") true) (list "previousKeyEncryptionKeys" "USHER_BROKER_PREVIOUS_KEY_ENCRYPTION_KEYS" true true) }}
{{- $name := index $item 0 -}}
{{- $ref := index $s $name -}}
{{- $secret := "" -}}
{{- if $ref.existingSecret -}}
{{- $secret = $ref.existingSecret -}}
{{- else if index $s.values $name -}}
{{- $secret = $.created -}}
{{- else if and (index $item 2) $creates (not (index $item 3)) -}}
{{- fail (printf "secrets.%s: give secrets.values.%s or name an existingSecret (the chart creates the Secret %s for the values it is given)" $name $name (include "usher.fullname" $root)) -}}
{{- else if and (index $item 2) (not $creates) -}}
{{- $secret = include "usher.fullname" $root -}}
{{- end -}}
{{- if $secret }}
- name: {{ index $item 1 }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $ref.key }}
      {{- if index $item 3 }}
      optional: true
      {{- end }}
{{- end }}
{{- end }}
{{- with $root.Values.env }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Whether the chart creates a Secret: some value is given. */}}
{{- define "usher.createsSecret" -}}
{{- $s := .Values.secrets -}}
{{- range $name, $value := $s.values }}{{ if and $value (not (index $s $name).existingSecret) }}yes{{ end }}{{ end -}}
{{- end -}}

{{/* The data of the Secret the chart creates. */}}
{{- define "usher.secretData" -}}
{{- $s := .Values.secrets -}}
{{- range $name, $value := $s.values }}
{{- if and $value (not (index $s $name).existingSecret) }}
{{ (index $s $name).key }}: {{ $value | b64enc | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Where the secret of the webhook sink at index is mounted. */}}
{{- define "usher.sinkSecretDir" -}}/etc/usher-sinks/{{ .index }}{{- end -}}

{{/* The volumes every pod mounts: the configuration, read-only, /data,
the webhook sinks' secrets and extraVolumes. */}}
{{- define "usher.volumes" -}}
- name: config
  configMap:
    name: {{ .configMap }}
- name: data
  emptyDir:
    sizeLimit: {{ .root.Values.dataSizeLimit }}
{{- range $i, $s := .root.Values.usher.audit.sinks }}
{{- if $s.webhook }}
- name: sink-{{ $i }}
  secret:
    secretName: {{ $s.webhook.secretName }}
    items:
      - key: {{ default "secret" $s.webhook.secretKey }}
        path: {{ default "secret" $s.webhook.secretKey }}
{{- end }}
{{- end }}
{{- with .root.Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "usher.volumeMounts" -}}
- name: config
  mountPath: {{ include "usher.configDir" . }}
  readOnly: true
- name: data
  mountPath: {{ include "usher.dataDir" . }}
{{- range $i, $s := .Values.usher.audit.sinks }}
{{- if $s.webhook }}
- name: sink-{{ $i }}
  mountPath: {{ include "usher.sinkSecretDir" (dict "index" $i) }}
  readOnly: true
{{- end }}
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The pod's security context, shared by the replicas and the migration. */}}
{{- define "usher.podSecurity" -}}
automountServiceAccountToken: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
