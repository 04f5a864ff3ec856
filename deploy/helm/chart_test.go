package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	corev1 "k8s.io/api/core/v1"
)

// TestChart lints and renders the chart with its default values and with
// a production-like values file, and checks what an operator relies on.
func TestChart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		args     []string
		replicas int32
		// secrets: each USHER_ variable read from a Secret, and the Secret.
		secrets map[string]string
		ingress bool
	}{
		{
			name: "default", replicas: 2,
			secrets: map[string]string{
				"USHER_BROKER_KEY_ENCRYPTION_KEY": "usher", "USHER_DATABASE_URL": "usher", "USHER_MODEL_API_KEY": "usher",
				"USHER_BROKER_PREVIOUS_KEY_ENCRYPTION_KEYS": "usher",
			},
		},
		{
			name: "production", args: []string{"-f", productionValues}, replicas: 3, ingress: true,
			secrets: map[string]string{
				"USHER_BROKER_KEY_ENCRYPTION_KEY": "usher-broker", "USHER_DATABASE_URL": "usher-postgres",
				"USHER_WEB_CLIENT_SECRET": "usher-entra", "USHER_MODEL_API_KEY": "usher-model",
				"USHER_BROKER_PREVIOUS_KEY_ENCRYPTION_KEYS": "usher",
			},
		},
		{
			// While the key-encryption key is replaced: the keys it
			// replaced, from a Secret of their own.
			name: "replacing the key-encryption key", replicas: 2,
			args: []string{"--set", "secrets.previousKeyEncryptionKeys.existingSecret=usher-kek-old"},
			secrets: map[string]string{
				"USHER_BROKER_KEY_ENCRYPTION_KEY": "usher", "USHER_DATABASE_URL": "usher", "USHER_MODEL_API_KEY": "usher",
				"USHER_BROKER_PREVIOUS_KEY_ENCRYPTION_KEYS": "usher-kek-old",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if out, err := helm(slices.Concat([]string{"lint", "--strict", chart}, required, tc.args)...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			r := render(t, tc.args...)
			d := r.deployment(t)
			if d.Spec.Replicas == nil || *d.Spec.Replicas != tc.replicas {
				t.Errorf("replicas = %v, want %d", d.Spec.Replicas, tc.replicas)
			}
			if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
				t.Errorf("rolling update %+v: want maxUnavailable 0", ru)
			}
			pod := d.Spec.Template.Spec
			checkPod(t, "Deployment", pod)
			checkProbes(t, pod.Containers[0])
			checkSecretEnv(t, "Deployment", pod.Containers[0], tc.secrets)
			checkGrace(t, r, pod)
			if len(pod.TopologySpreadConstraints) == 0 {
				t.Error("no topology spread constraints")
			}
			if pod.Containers[0].Args[0] != "serve" {
				t.Errorf("the replicas run %v, want usher serve", pod.Containers[0].Args)
			}

			job := r.migration(t)
			if hooks := job.Annotations["helm.sh/hook"]; hooks != "pre-install,pre-upgrade" {
				t.Errorf("the migration's hooks = %q, want pre-install,pre-upgrade", hooks)
			}
			jpod := job.Spec.Template.Spec
			checkPod(t, "Job", jpod)
			checkSecretEnv(t, "Job", jpod.Containers[0], tc.secrets)
			if a := jpod.Containers[0].Args; len(a) == 0 || a[0] != "migrate" {
				t.Errorf("the Job runs %v, want usher migrate", a)
			}
			// The Job reads a hook copy of the configuration (it runs before
			// the release's objects exist): the same file as the replicas'.
			_, serveCfg := r.configFile(t, pod)
			_, migrateCfg := r.configFile(t, jpod)
			if serveCfg == "" || serveCfg != migrateCfg {
				t.Errorf("the migration's usher.yaml differs from the replicas':\n%s\n---\n%s", migrateCfg, serveCfg)
			}
			if cm := jpod.Volumes[0].ConfigMap; cm == nil || !r.hookConfigMaps[cm.Name] {
				t.Errorf("the migration's configuration is not a hook object created before it: %+v", jpod.Volumes[0])
			}
			if c := parseConfig(t, serveCfg); c.Identity.Issuer == "" {
				t.Errorf("usher.yaml names no identity.issuer: the development sign-in would be on by default\n%s", serveCfg)
			}

			if len(r.services) != 1 || r.services[0].Spec.Ports[0].TargetPort.String() != "http" {
				t.Errorf("services %+v: want one, to the port named http", r.services)
			}
			if len(r.budgets) != 1 || r.budgets[0].Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("pod disruption budgets %+v: want one, maxUnavailable 1", r.budgets)
			}
			if len(r.accounts) != 1 || r.accounts[0].AutomountServiceAccountToken == nil || *r.accounts[0].AutomountServiceAccountToken {
				t.Errorf("service accounts %+v: want one, without a mounted token", r.accounts)
			}
			if tc.ingress {
				checkIngress(t, r, parseConfig(t, serveCfg).Server.PublicURL)
				if len(r.monitoring) != 2 {
					t.Errorf("%d Prometheus Operator objects, want a ServiceMonitor and a PrometheusRule", len(r.monitoring))
				}
				if len(r.secrets) != 0 {
					t.Errorf("the production values reference Secrets, the chart creates none; it renders %v", r.kinds)
				}
			}
		})
	}
}

// checkPod checks the image and the security of a pod's containers.
func checkPod(t *testing.T, what string, pod corev1.PodSpec) {
	t.Helper()
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s: the service account token is mounted", what)
	}
	psc := pod.SecurityContext
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod seccomp profile is not RuntimeDefault: %+v", what, psc)
	}
	writable := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.EmptyDir != nil {
			writable[v.Name] = true
		}
	}
	for _, c := range pod.Containers {
		if !imageTag.MatchString(c.Image) || strings.HasSuffix(c.Image, ":latest") {
			t.Errorf("%s: image %q: want a release's tag or a digest, never latest", what, c.Image)
		}
		sc := c.SecurityContext
		if sc == nil {
			t.Fatalf("%s: container %s has no security context", what, c.Name)
		}
		if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
			t.Errorf("%s: container %s: runAsNonRoot %v, runAsUser %v; want true and 65532", what, c.Name, sc.RunAsNonRoot, sc.RunAsUser)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: container %s: the root filesystem is writable", what, c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: container %s allows privilege escalation", what, c.Name)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: container %s: capabilities %+v, want all dropped", what, c.Name, sc.Capabilities)
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: container %s: seccomp is not RuntimeDefault", what, c.Name)
		}
		// With a read-only root, what is mounted writable is all Usher
		// can write: an emptyDir at /data (server.data_dir).
		for _, m := range c.VolumeMounts {
			if !m.ReadOnly && (!writable[m.Name] || m.MountPath != "/data") {
				t.Errorf("%s: %s is mounted writable from %s; only the /data emptyDir may be", what, m.MountPath, m.Name)
			}
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: container %s has no memory request and limit", what, c.Name)
		}
	}
}

// checkProbes checks liveness on /healthz and readiness on /readyz, on
// the container's own port.
func checkProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"startup", c.StartupProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no %s probe over HTTP", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != c.Ports[0].Name {
			t.Errorf("%s probe %s on %s, want %s on %s", p.name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.String(), p.path, c.Ports[0].Name)
		}
	}
}

// checkSecretEnv checks that each secret reaches the container from the
// named Secret, never as a plain value.
func checkSecretEnv(t *testing.T, what string, c corev1.Container, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, "USHER_") {
			continue
		}
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("%s: %s is not read from a Secret", what, e.Name)
			continue
		}
		got[e.Name] = e.ValueFrom.SecretKeyRef.Name
		// The keys a key replaced are there only during its replacement,
		// the model's key only for an endpoint that wants one.
		optional := e.Name == "USHER_BROKER_PREVIOUS_KEY_ENCRYPTION_KEYS" || e.Name == "USHER_MODEL_API_KEY"
		if o := e.ValueFrom.SecretKeyRef.Optional; (o != nil && *o) != optional {
			t.Errorf("%s: %s is optional: %v, want %v", what, e.Name, o != nil && *o, optional)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: secrets from %v, want %v", what, got, want)
	}
}

// checkGrace checks that a stopping replica has the time to drain: the
// preStop pause, server.shutdown_delay with /readyz failing, then
// server.shutdown_timeout for the requests and as long again for the
// outcomes of answered tool calls.
func checkGrace(t *testing.T, r *release, pod corev1.PodSpec) {
	t.Helper()
	_, content := r.configFile(t, pod)
	cfg := parseConfig(t, content)
	shutdown, err := time.ParseDuration(cfg.Server.ShutdownTimeout)
	if err != nil {
		t.Fatalf("server.shutdown_timeout: %v", err)
	}
	delay, err := time.ParseDuration(cfg.Server.ShutdownDelay)
	if err != nil {
		t.Fatalf("server.shutdown_delay: %v", err)
	}
	c := pod.Containers[0]
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatal("no preStop pause: the Service would route to a replica after it stopped listening")
	}
	need := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second + delay + 2*shutdown
	if pod.TerminationGracePeriodSeconds == nil || time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second <= need {
		t.Errorf("terminationGracePeriodSeconds %v, want more than %s", pod.TerminationGracePeriodSeconds, need)
	}
}

// checkIngress checks the ingress's host, TLS and the annotations that
// keep live-update streams (SSE, WebSocket) open through ingress-nginx.
func checkIngress(t *testing.T, r *release, publicURL string) {
	t.Helper()
	if len(r.ingresses) != 1 {
		t.Fatalf("%d Ingresses, want 1", len(r.ingresses))
	}
	in := r.ingresses[0]
	host := strings.TrimPrefix(publicURL, "https://")
	if in.Spec.Rules[0].Host != host || len(in.Spec.TLS) != 1 || in.Spec.TLS[0].Hosts[0] != host {
		t.Errorf("ingress rules %+v, TLS %+v: want %s with TLS", in.Spec.Rules, in.Spec.TLS, host)
	}
	for k, v := range map[string]string{
		"nginx.ingress.kubernetes.io/proxy-buffering":    "off",
		"nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
		"nginx.ingress.kubernetes.io/proxy-send-timeout": "3600",
		"cert-manager.io/cluster-issuer":                 "letsencrypt",
	} {
		if in.Annotations[k] != v {
			t.Errorf("ingress annotation %s = %q, want %q", k, in.Annotations[k], v)
		}
	}
}

// TestValuesRefused checks that values.schema.json and the templates
// refuse what would deploy a broken or unsafe Usher, naming the value.
func TestValuesRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"latest tag", []string{"--set", "image.tag=latest"}, "image.tag: latest is refused"},
		{"unknown value", []string{"--set", "usher.issuer=https://login.example.com"}, "additional properties 'issuer' not allowed"},
		{"bad log level", []string{"--set", "usher.log.level=loud"}, "/usher/log/level"},
		{"no replicas", []string{"--set", "replicaCount=0"}, "/replicaCount"},
		{"public URL with a path", []string{"--set", "usher.publicURL=https://example.com/usher"}, "/usher/publicURL"},
		{"short key", []string{"--set", "secrets.values.keyEncryptionKey=c2hvcnQ="}, "/secrets/values/keyEncryptionKey"},
		{"no issuer", []string{"--set", "usher.identity.issuer="}, "usher.identity.issuer is required"},
		{"plain http webhook", []string{"--set-json", `usher.audit.sinks=[{"name":"siem","webhook":{"url":"http://siem.example","secretName":"s"}}]`}, "/usher/audit/sinks/0/webhook/url"},
		{"sink of both kinds", []string{"--set-json", `usher.audit.sinks=[{"name":"x","file":{"path":"-"},"webhook":{"url":"https://siem.example","secretName":"s"}}]`}, "/usher/audit/sinks/0"},
		{"http public URL", []string{"--set", "usher.publicURL=http://usher.example.com"}, "/usher/publicURL"},
		{"http issuer", []string{"--set", "usher.identity.issuer=http://login.example.com/tenant/v2.0"}, "/usher/identity/issuer"},
		{"no model", []string{"--set", "usher.model.name="}, "usher.model.name is required with the openai provider"},
		{"no model endpoint", []string{"--set", "usher.model.baseURL="}, "usher.model.baseURL is required with the openai provider"},
		{"model not offered", []string{"--set-json", `usher.model.models=["gpt-a","gpt-b"]`}, "usher.model.name (gpt-test) must be one of usher.model.models"},
		{"web client without scopes", []string{"--set", "usher.web.clientID=web"}, "usher.web.scopes: the API's scope"},
		{"issuer without audiences", []string{"--set-json", "usher.identity.audiences=[]"}, "usher.identity.audiences: at least one audience is required"},
		{"issuer without audiences, cleared", []string{"--set", "usher.identity.audiences=null"}, "usher.identity.audiences: at least one audience is required"},
		{"issuer without scopes", []string{"--set-json", "usher.identity.requiredScopes=[]"}, "usher.identity.requiredScopes: the API's delegated scope"},
		{"a value and an existing secret", []string{"--set", "secrets.values.databaseURL=postgres://db/usher", "--set", "secrets.databaseURL.existingSecret=db"},
			"secrets.values.databaseURL is given, and secrets.databaseURL.existingSecret (db) names the Secret it is read from"},
		{"every problem at once", []string{"--set", "usher.model.name=", "--set", "usher.web.clientID=web"}, "usher.web.scopes: the API's scope as the web client requests it (e.g. api://usher/access_as_user) is required with usher.web.clientID\n- usher.model.name is required"},
		{"development sign-in published", []string{"--set", "usher.identity.issuer=", "--set", "usher.developmentSignIn=true"},
			"usher.publicURL (https://usher.example.com): usher.developmentSignIn signs in anyone who types a user name, so it is reached only through kubectl port-forward"},
		{"development sign-in behind an Ingress", []string{"--set", "usher.identity.issuer=", "--set", "usher.developmentSignIn=true", "--set", "usher.publicURL=http://127.0.0.1:8080", "--set", "ingress.enabled=true"},
			"ingress.enabled: an Ingress would publish the development sign-in"},
		{"development sign-in on a load balancer", []string{"--set", "usher.identity.issuer=", "--set", "usher.developmentSignIn=true", "--set", "usher.publicURL=http://localhost:8080", "--set", "service.type=LoadBalancer"},
			"service.type (LoadBalancer) would publish the development sign-in"},
		{"a mount without a path", []string{"--set-json", `extraVolumeMounts=[{"name":"usher-files"}]`}, "/extraVolumeMounts/0"},
		{"half the secrets", []string{"--set", "secrets.values.databaseURL=postgres://db/usher"}, "secrets.keyEncryptionKey: give secrets.values.keyEncryptionKey or name an existingSecret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := helm(slices.Concat([]string{"template", "usher", chart}, required, tc.args)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template %v = %v; want an error with %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestChartCreatesSecret renders the chart with secret values: the chart
// creates a Secret of them for the replicas and a hook copy for the
// migration Job, which runs before the release's objects exist.
func TestChartCreatesSecret(t *testing.T) {
	t.Parallel()
	const kek = "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="
	r := render(t, "--set", "secrets.values.keyEncryptionKey="+kek, "--set", "secrets.values.databaseURL=postgres://usher@db/usher",
		"--set", "secrets.modelAPIKey.existingSecret=model")
	for name, c := range map[string]corev1.Container{
		"usher":         r.deployment(t).Spec.Template.Spec.Containers[0],
		"usher-migrate": r.migration(t).Spec.Template.Spec.Containers[0],
	} {
		s := r.secrets[name]
		if s == nil {
			t.Fatalf("no Secret %s (%v)", name, r.kinds)
		}
		if string(s.Data["key-encryption-key"]) != kek || string(s.Data["database-url"]) != "postgres://usher@db/usher" || len(s.Data) != 2 {
			t.Errorf("Secret %s holds %v", name, s.Data)
		}
		checkSecretEnv(t, name, c, map[string]string{
			"USHER_BROKER_KEY_ENCRYPTION_KEY": name, "USHER_DATABASE_URL": name, "USHER_MODEL_API_KEY": "model",
		})
	}
	if hook := r.secrets["usher-migrate"].Annotations["helm.sh/hook"]; hook != "pre-install,pre-upgrade" {
		t.Errorf("the migration's Secret is not a hook created before it: %q", hook)
	}
}

// TestChartConfiguresReviewersAndSinks renders reviewers, admins and two
// audit sinks: usher.yaml names them, and the webhook's secret file is the key
// of the operator's Secret, mounted read-only where usher.yaml says, in
// the replicas and in the migration Job (which validates the same
// configuration).
func TestChartConfiguresReviewersAndSinks(t *testing.T) {
	t.Parallel()
	r := render(t, "--set-json", `usher.review.groups=["security"]`, "--set", "usher.audit.checkpointInterval=5m",
		"--set-json", `usher.admin.groups=["operators"]`, "--set", "usher.admin.heartbeatInterval=5s",
		"--set-json", `usher.audit.sinks=[{"name":"siem","webhook":{"url":"https://siem.example/usher","secretName":"usher-siem","secretKey":"token"}},{"name":"local","file":{"path":"-"}}]`)
	for name, pod := range map[string]corev1.PodSpec{"replicas": r.deployment(t).Spec.Template.Spec, "migration": r.migration(t).Spec.Template.Spec} {
		_, content := r.configFile(t, pod)
		var cfg struct {
			Review struct {
				Groups []string `json:"groups"`
			} `json:"review"`
			Admin struct {
				Groups            []string `json:"groups"`
				HeartbeatInterval string   `json:"heartbeat_interval"`
			} `json:"admin"`
			Audit struct {
				CheckpointInterval string `json:"checkpoint_interval"`
				Sinks              []struct {
					Name    string `json:"name"`
					Webhook *struct {
						URL        string `json:"url"`
						SecretFile string `json:"secret_file"`
					} `json:"webhook"`
					File *struct {
						Path string `json:"path"`
					} `json:"file"`
				} `json:"sinks"`
			} `json:"audit"`
		}
		if err := yaml.Unmarshal([]byte(content), &cfg); err != nil {
			t.Fatal(err)
		}
		if len(cfg.Review.Groups) != 1 || cfg.Review.Groups[0] != "security" || cfg.Audit.CheckpointInterval != "5m" {
			t.Errorf("%s: review %v, checkpoint interval %q", name, cfg.Review.Groups, cfg.Audit.CheckpointInterval)
		}
		if !slices.Equal(cfg.Admin.Groups, []string{"operators"}) || cfg.Admin.HeartbeatInterval != "5s" {
			t.Errorf("%s: admin %v, heartbeat interval %q", name, cfg.Admin.Groups, cfg.Admin.HeartbeatInterval)
		}
		if len(cfg.Audit.Sinks) != 2 || cfg.Audit.Sinks[0].Webhook == nil || cfg.Audit.Sinks[1].File == nil || cfg.Audit.Sinks[1].File.Path != "-" {
			t.Fatalf("%s: sinks %+v", name, cfg.Audit.Sinks)
		}
		file := cfg.Audit.Sinks[0].Webhook.SecretFile
		var mounted bool
		for _, m := range pod.Containers[0].VolumeMounts {
			key, ok := strings.CutPrefix(file, m.MountPath+"/")
			if !ok {
				continue
			}
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "usher-siem" && m.ReadOnly &&
					len(v.Secret.Items) == 1 && v.Secret.Items[0].Key == "token" && v.Secret.Items[0].Path == key {
					mounted = true
				}
			}
		}
		if !mounted {
			t.Errorf("%s: the webhook's secret file %s is not the Secret usher-siem's key token, mounted read-only", name, file)
		}
	}
}

// TestChartImage checks the image the chart runs: a chart of a release
// runs that release's image by default; a chart between releases, which
// writes configuration no released binary takes, requires image.tag or
// image.digest; latest is refused, with a message that says what to give.
func TestChartImage(t *testing.T) {
	t.Parallel()
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	meta, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(meta, &c); err != nil {
		t.Fatal(err)
	}
	// Between releases the chart is of the next one, as CHANGELOG's
	// [Unreleased] is.
	if !strings.Contains(c.AppVersion, "-") || c.Version != c.AppVersion {
		t.Errorf("Chart.yaml: version %s, appVersion %s; want both the next release's with a pre-release (0.2.0-dev)", c.Version, c.AppVersion)
	}
	if _, err := helm("template", "usher", chart, "--set", "usher.model.name=gpt-test"); err == nil || !strings.Contains(err.Error(), "image.tag is required: this chart is of Usher "+c.AppVersion) {
		t.Errorf("helm template without image.tag = %v; want image.tag required", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "image.tag=v0.2.0-dev-5-gabcdef0"}, "ghcr.io/usherhq/usher:v0.2.0-dev-5-gabcdef0"},
		{[]string{"--set", "image.digest=" + digest}, "ghcr.io/usherhq/usher@" + digest},
	} {
		r := render(t, append([]string{"--set", "image.tag="}, tc.args...)...)
		for what, pod := range map[string]corev1.PodSpec{"Deployment": r.deployment(t).Spec.Template.Spec, "Job": r.migration(t).Spec.Template.Spec} {
			if got := pod.Containers[0].Image; got != tc.want {
				t.Errorf("%v: the %s's image is %s, want %s", tc.args, what, got, tc.want)
			}
		}
	}

	// The same chart as a release's: its image by default.
	release := t.TempDir()
	if err := os.CopyFS(release, os.DirFS(chart)); err != nil {
		t.Fatal(err)
	}
	tagged := strings.ReplaceAll(string(meta), c.AppVersion, "0.2.0")
	if err := os.WriteFile(filepath.Join(release, "Chart.yaml"), []byte(tagged), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := helm("template", "usher", release, "--show-only", "templates/deployment.yaml", "--set", "usher.model.name=gpt-test")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "image: ghcr.io/usherhq/usher:v0.2.0\n") {
		t.Errorf("the chart of release 0.2.0 runs, by default:\n%s\nwant ghcr.io/usherhq/usher:v0.2.0", out)
	}
}

// TestChartClearsLists checks that a list of values may be cleared the
// Helm way, with null (--set usher.identity.tenants=null), where none is
// a choice: usher.yaml then names none.
func TestChartClearsLists(t *testing.T) {
	t.Parallel()
	r := render(t, "--set", "usher.identity.tenants=null", "--set", "usher.model.models=null", "--set", "usher.review.groups=null",
		"--set", "usher.admin.groups=null", "--set", "usher.audit.sinks=null", "--set", "usher.web.scopes=null", "--set", "topologySpread.topologyKeys=null")
	_, content := r.configFile(t, r.deployment(t).Spec.Template.Spec)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(content), &cfg); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"tenants", "models", "review", "sinks"} {
		if strings.Contains(content, key+":") {
			t.Errorf("usher.yaml names %s, cleared:\n%s", key, content)
		}
	}
	if n := len(r.deployment(t).Spec.Template.Spec.TopologySpreadConstraints); n != 0 {
		t.Errorf("%d spread constraints without topology keys", n)
	}
}

// TestChartExtraVolumesAndEnv renders the extension points for what
// usher.yaml names but must not hold: a Secret's file mounted read-only
// where oauth.clients[].secret_file and the database's sslrootcert say,
// and variables from a Secret of the operator's, in the replicas and in
// the migration Job (which validates the same configuration).
func TestChartExtraVolumesAndEnv(t *testing.T) {
	t.Parallel()
	r := render(t,
		"--set-json", `extraVolumes=[{"name":"usher-files","secret":{"secretName":"usher-files","items":[{"key":"ops-console","path":"ops-console"},{"key":"ca.crt","path":"db-ca.crt"}]}}]`,
		"--set-json", `extraVolumeMounts=[{"name":"usher-files","mountPath":"/etc/usher-files","readOnly":true}]`,
		"--set-json", `envFrom=[{"secretRef":{"name":"usher-extra"}}]`,
		"--set-json", `env=[{"name":"GOMEMLIMIT","value":"450MiB"}]`,
		"--set-json", `usher.extraConfig={"oauth":{"clients":[{"id":"ops-console","name":"Ops console","redirect_uris":["https://ops.example.com/callback"],"auth":"client_secret_basic","secret_file":"/etc/usher-files/ops-console"}]}}`)
	for what, pod := range map[string]corev1.PodSpec{"Deployment": r.deployment(t).Spec.Template.Spec, "Job": r.migration(t).Spec.Template.Spec} {
		checkPod(t, what, pod)
		c := pod.Containers[0]
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "usher-files" })
		if i < 0 || pod.Volumes[i].Secret == nil || pod.Volumes[i].Secret.SecretName != "usher-files" || len(pod.Volumes[i].Secret.Items) != 2 {
			t.Errorf("%s: volumes %+v: want the Secret usher-files", what, pod.Volumes)
		}
		if pod.Volumes[0].ConfigMap == nil {
			t.Errorf("%s: the configuration is no longer the first volume: %+v", what, pod.Volumes[0])
		}
		j := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "usher-files" })
		if j < 0 || c.VolumeMounts[j].MountPath != "/etc/usher-files" || !c.VolumeMounts[j].ReadOnly {
			t.Errorf("%s: mounts %+v: want usher-files read-only at /etc/usher-files", what, c.VolumeMounts)
		}
		if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef == nil || c.EnvFrom[0].SecretRef.Name != "usher-extra" {
			t.Errorf("%s: envFrom %+v: want the Secret usher-extra", what, c.EnvFrom)
		}
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" && e.Value == "450MiB" }) {
			t.Errorf("%s: env %+v: want GOMEMLIMIT", what, c.Env)
		}
		if _, content := r.configFile(t, pod); !strings.Contains(content, "secret_file: /etc/usher-files/ops-console") {
			t.Errorf("%s: usher.yaml names no secret file:\n%s", what, content)
		}
	}
}

// TestDocsHelmTimeout checks that every helm install and helm upgrade of
// the docs waits longer than the migration Job may run
// (migration.activeDeadlineSeconds): with Helm's default --timeout of 5
// minutes, the release would fail while the Job still migrates.
func TestDocsHelmTimeout(t *testing.T) {
	t.Parallel()
	values, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Migration struct {
			ActiveDeadlineSeconds int `json:"activeDeadlineSeconds"`
		} `json:"migration"`
	}
	if err := yaml.Unmarshal(values, &v); err != nil || v.Migration.ActiveDeadlineSeconds == 0 {
		t.Fatalf("values.yaml: migration.activeDeadlineSeconds: %v", err)
	}
	deadline := time.Duration(v.Migration.ActiveDeadlineSeconds) * time.Second
	var commands int
	for _, doc := range []string{"../../docs/deploy.md", "../../README.md", "usher/README.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(b), "\\\n", " ")
		for line := range strings.Lines(text) {
			fields := strings.Fields(line)
			if len(fields) < 2 || fields[0] != "helm" || (fields[1] != "install" && fields[1] != "upgrade") {
				continue
			}
			commands++
			i := slices.Index(fields, "--timeout")
			if i < 0 || i+1 == len(fields) {
				t.Errorf("%s: %s: no --timeout; Helm's 5m is shorter than the migration's deadline, %s", doc, strings.TrimSpace(line), deadline)
				continue
			}
			if d, err := time.ParseDuration(fields[i+1]); err != nil || d <= deadline {
				t.Errorf("%s: %s: --timeout %s, want longer than the migration's deadline, %s", doc, strings.TrimSpace(line), fields[i+1], deadline)
			}
		}
	}
	if commands < 3 {
		t.Errorf("%d helm install or upgrade commands in the docs; the test reads none of them?", commands)
	}
}
