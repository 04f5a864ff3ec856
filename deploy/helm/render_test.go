package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/usherhq/usher/internal/testenv"
)

// TestMain runs the tests with the usher of USHER_TEST_BIN (make test
// builds it), or else one it builds from Usher's own module: testenv would
// build it in this one, whose go.mod (with Helm's dependencies) picks other
// versions of some modules than the released binary has.
func TestMain(m *testing.M) {
	if os.Getenv(testenv.EnvDir) == "" {
		dir, err := os.MkdirTemp("", "usher-chart-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		build := exec.Command("go", "build", "-trimpath", "-o", dir+"/", "./cmd/usher")
		build.Dir = "../.."
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build ./cmd/usher: %v\n%s", err, out)
			os.Exit(1)
		}
		os.Setenv(testenv.EnvDir, dir)
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// chart is the chart's directory, relative to this package.
const chart = "usher"

// productionValues is the production-like values file.
const productionValues = "usher/ci/production-values.yaml"

// kubeVersion is the Kubernetes version the chart is rendered and linted
// for, unless a test names another: the oldest it supports. (Without
// --kube-version, a Helm built without its release's link flags, as
// `go tool helm` is, assumes 1.20.)
const kubeVersion = "v1.30.0"

// helm runs the pinned Helm (the tool of this module's go.mod) and
// returns its output, or an error holding its standard error.
func helm(args ...string) (string, error) {
	if len(args) > 0 && (args[0] == "template" || args[0] == "lint") && !slices.Contains(args, "--kube-version") {
		args = append(args, "--kube-version", kubeVersion)
	}
	cmd := exec.Command("go", append([]string{"tool", "helm"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// required are the values every rendering in these tests gives, before
// its own, which the defaults leave for the operator to give: the chart,
// between releases, requires the tag of an image built from its commit
// (TestChartImage renders without it), and the openai provider a model.
var required = []string{"--set", "image.tag=v0.0.0-20261207000000-0123456789ab", "--set", "usher.model.name=gpt-test"}

// release is a rendered chart: every object decoded into its type.
type release struct {
	deployments    []*appsv1.Deployment
	jobs           []*batchv1.Job
	configMaps     map[string]*corev1.ConfigMap
	secrets        map[string]*corev1.Secret
	services       []*corev1.Service
	accounts       []*corev1.ServiceAccount
	ingresses      []*networkingv1.Ingress
	budgets        []*policyv1.PodDisruptionBudget
	monitoring     []*unstructured.Unstructured // ServiceMonitor, PrometheusRule
	kinds          []string                     // kind/name of every object, in order
	hookConfigMaps map[string]bool
}

// typed are the kinds the chart renders, each with its k8s.io/api type.
var typed = map[string]func(r *release, data []byte) error{
	"apps/v1/Deployment":                      decodeInto(func(r *release, o *appsv1.Deployment) { r.deployments = append(r.deployments, o) }),
	"batch/v1/Job":                            decodeInto(func(r *release, o *batchv1.Job) { r.jobs = append(r.jobs, o) }),
	"v1/ConfigMap":                            decodeInto(func(r *release, o *corev1.ConfigMap) { r.configMaps[o.Name] = o }),
	"v1/Secret":                               decodeInto(func(r *release, o *corev1.Secret) { r.secrets[o.Name] = o }),
	"v1/Service":                              decodeInto(func(r *release, o *corev1.Service) { r.services = append(r.services, o) }),
	"v1/ServiceAccount":                       decodeInto(func(r *release, o *corev1.ServiceAccount) { r.accounts = append(r.accounts, o) }),
	"networking.k8s.io/v1/Ingress":            decodeInto(func(r *release, o *networkingv1.Ingress) { r.ingresses = append(r.ingresses, o) }),
	"policy/v1/PodDisruptionBudget":           decodeInto(func(r *release, o *policyv1.PodDisruptionBudget) { r.budgets = append(r.budgets, o) }),
	"monitoring.coreos.com/v1/ServiceMonitor": decodeUnstructured,
	"monitoring.coreos.com/v1/PrometheusRule": decodeUnstructured,
}

// decodeInto decodes an object strictly: a field its type does not have
// fails, as the API server's strict field validation would.
func decodeInto[T any](add func(*release, *T)) func(*release, []byte) error {
	return func(r *release, data []byte) error {
		o := new(T)
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(o); err != nil {
			return err
		}
		add(r, o)
		return nil
	}
}

// decodeUnstructured keeps a Prometheus Operator object, whose types are
// not in k8s.io/api, as unstructured, with the fields it must have.
func decodeUnstructured(r *release, data []byte) error {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return err
	}
	if _, ok, _ := unstructured.NestedMap(u.Object, "spec"); !ok {
		return fmt.Errorf("%s has no spec", u.GetKind())
	}
	r.monitoring = append(r.monitoring, u)
	return nil
}

// render runs helm template on the chart with args and decodes every
// object; an object of a kind the chart should not render, or with a
// field its type does not have, fails the test.
func render(t *testing.T, args ...string) *release {
	t.Helper()
	out, err := helm(slices.Concat([]string{"template", "usher", chart, "--namespace", "usher"}, required, args)...)
	if err != nil {
		t.Fatal(err)
	}
	r := &release{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}, hookConfigMaps: map[string]bool{}}
	for doc := range strings.SplitSeq(out, "\n---\n") {
		data, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, doc)
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name        string            `json:"name"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(data, &head); err != nil || head.Kind == "" {
			continue // a document of comments only
		}
		decode, ok := typed[head.APIVersion+"/"+head.Kind]
		if !ok {
			t.Fatalf("the chart renders %s %s, a kind this test does not know", head.APIVersion, head.Kind)
		}
		if err := decode(r, data); err != nil {
			t.Fatalf("%s %s does not decode strictly into its type: %v", head.Kind, head.Metadata.Name, err)
		}
		if head.Kind == "ConfigMap" && head.Metadata.Annotations["helm.sh/hook"] != "" {
			r.hookConfigMaps[head.Metadata.Name] = true
		}
		r.kinds = append(r.kinds, head.Kind+"/"+head.Metadata.Name)
	}
	return r
}

// deployment is the release's one Deployment.
func (r *release) deployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	if len(r.deployments) != 1 {
		t.Fatalf("%d Deployments, want 1 (%v)", len(r.deployments), r.kinds)
	}
	return r.deployments[0]
}

// migration is the release's one Job: the migration.
func (r *release) migration(t *testing.T) *batchv1.Job {
	t.Helper()
	if len(r.jobs) != 1 {
		t.Fatalf("%d Jobs, want 1 (%v)", len(r.jobs), r.kinds)
	}
	return r.jobs[0]
}

// configFile is the usher.yaml a pod reads: the file named by its
// container's --config, from the ConfigMap mounted there.
func (r *release) configFile(t *testing.T, pod corev1.PodSpec) (path, content string) {
	t.Helper()
	c := pod.Containers[0]
	for i, a := range c.Args {
		if a == "--config" && i+1 < len(c.Args) {
			path = c.Args[i+1]
		}
	}
	if path == "" {
		t.Fatalf("container %s has no --config: %v", c.Name, c.Args)
	}
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(path, m.MountPath+"/")
		if !ok {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cm := r.configMaps[v.ConfigMap.Name]
				if cm == nil {
					t.Fatalf("volume %s names ConfigMap %s, which the chart does not render", v.Name, v.ConfigMap.Name)
				}
				return path, cm.Data[rel]
			}
		}
	}
	t.Fatalf("no ConfigMap is mounted at %s", path)
	return "", ""
}

// usherConfig is the part of usher.yaml the tests read.
type usherConfig struct {
	Server struct {
		Addr            string `json:"addr"`
		PublicURL       string `json:"public_url"`
		DataDir         string `json:"data_dir"`
		ShutdownTimeout string `json:"shutdown_timeout"`
		ShutdownDelay   string `json:"shutdown_delay"`
		MetricsAddr     string `json:"metrics_addr"`
	} `json:"server"`
	Identity struct {
		Issuer string `json:"issuer"`
	} `json:"identity"`
}

func parseConfig(t *testing.T, content string) usherConfig {
	t.Helper()
	var c usherConfig
	if err := yaml.Unmarshal([]byte(content), &c); err != nil {
		t.Fatalf("usher.yaml: %v\n%s", err, content)
	}
	return c
}

// imageTag matches an image reference's tag or digest.
var imageTag = regexp.MustCompile(`^[^@]+(:[^:/@]+|@sha256:[0-9a-f]{64})$`)

// TestChartSelectors checks what selects the replicas' pods: the Service
// and the PodDisruptionBudget select them and not the migration Job's
// pods (a budget with maxUnavailable over Job-owned pods allows no
// disruption, and the Service would route to a pod that does not serve),
// and the Deployment's selector, immutable across upgrades, and the
// Service's are the ones of the chart's first release.
func TestChartSelectors(t *testing.T) {
	t.Parallel()
	r := render(t)
	d := r.deployment(t)
	if want := map[string]string{"app.kubernetes.io/name": "usher", "app.kubernetes.io/instance": "usher"}; d.Spec.Selector == nil ||
		len(d.Spec.Selector.MatchExpressions) > 0 || !maps.Equal(d.Spec.Selector.MatchLabels, want) {
		t.Errorf("the Deployment's selector is %+v, want %v: it cannot change across upgrades", d.Spec.Selector, want)
	}
	server := labels.Set(d.Spec.Template.Labels)
	migrate := labels.Set(r.migration(t).Spec.Template.Labels)
	if len(r.services) != 1 || len(r.budgets) != 1 {
		t.Fatalf("%d Services and %d PodDisruptionBudgets, want one of each", len(r.services), len(r.budgets))
	}
	budget, err := metav1.LabelSelectorAsSelector(r.budgets[0].Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]labels.Selector{
		"the Deployment":          mustSelector(t, d.Spec.Selector),
		"the Service":             labels.SelectorFromSet(r.services[0].Spec.Selector),
		"the PodDisruptionBudget": budget,
	} {
		if !s.Matches(server) {
			t.Errorf("%s's selector %s does not select the replicas' pods %v", what, s, server)
		}
		if what != "the Deployment" && s.Matches(migrate) {
			t.Errorf("%s's selector %s selects the migration Job's pods %v", what, s, migrate)
		}
	}
	// The Service's selector is the first release's: a Service whose
	// selector changed would route to no pod on the upgrade until a new
	// replica is ready.
	if !maps.Equal(r.services[0].Spec.Selector, d.Spec.Selector.MatchLabels) {
		t.Errorf("the Service selects %v, want %v, as the chart's first release", r.services[0].Spec.Selector, d.Spec.Selector.MatchLabels)
	}
	for _, c := range d.Spec.Template.Spec.TopologySpreadConstraints {
		if s := mustSelector(t, c.LabelSelector); !s.Matches(server) || s.Matches(migrate) {
			t.Errorf("the spread over %s selects %s: want the replicas' pods only", c.TopologyKey, s)
		}
	}
}

func mustSelector(t *testing.T, ls *metav1.LabelSelector) labels.Selector {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestChartIngressHost checks that the Ingress's host is the host name of
// usher.publicURL: a rule's host has no port.
func TestChartIngressHost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ publicURL, host string }{
		{"https://usher.example.com", "usher.example.com"},
		{"https://usher.example.com:8443", "usher.example.com"},
		{"https://usher.example.com:8443/", "usher.example.com"},
	} {
		r := render(t, "--set", "usher.publicURL="+tc.publicURL, "--set", "ingress.enabled=true", "--set", "ingress.tlsSecretName=usher-tls")
		if len(r.ingresses) != 1 {
			t.Fatalf("%d Ingresses, want 1", len(r.ingresses))
		}
		in := r.ingresses[0]
		if in.Spec.Rules[0].Host != tc.host || in.Spec.TLS[0].Hosts[0] != tc.host {
			t.Errorf("publicURL %s: the Ingress's host %q, TLS hosts %v; want %q", tc.publicURL, in.Spec.Rules[0].Host, in.Spec.TLS[0].Hosts, tc.host)
		}
	}
}

// TestChartKubeVersion checks that the chart refuses a cluster older than
// 1.30, whose pods have no sleep action for the preStop pause, and takes a
// managed cluster's version with a suffix.
func TestChartKubeVersion(t *testing.T) {
	t.Parallel()
	if _, err := helm(slices.Concat([]string{"template", "usher", chart, "--kube-version", "v1.29.9"}, required)...); err == nil || !strings.Contains(err.Error(), "chart requires kubeVersion") {
		t.Errorf("helm template for Kubernetes 1.29 = %v; want the chart's kubeVersion refused", err)
	}
	for _, v := range []string{"v1.30.0", "v1.30.2-eks-1552ad0", "v1.34.1"} {
		render(t, "--kube-version", v)
	}
}
