package helm

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// monitoringDir holds the dashboard and the alert rules; the chart ships
// copies of them in its files/.
var monitoringDir = filepath.Join("..", "monitoring")

// TestMonitoringFilesShippedAsTheyAre checks that the chart's copies of
// deploy/monitoring's dashboard and alert rules are the same files.
func TestMonitoringFilesShippedAsTheyAre(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"usher-alerts.yaml", "usher-dashboard.json"} {
		want, err := os.ReadFile(filepath.Join(monitoringDir, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(chart, "files", f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s/files/%s differs from deploy/monitoring/%s: copy it again", chart, f, f)
		}
	}
}

// alertRules is a Prometheus rule file.
type alertRules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// readAlertRules reads deploy/monitoring's alert rules.
func readAlertRules(t *testing.T) alertRules {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir, "usher-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := yaml.UnmarshalStrict(b, &rules); err != nil {
		t.Fatal(err)
	}
	return rules
}

// dashboard is what the tests read of the Grafana dashboard.
type dashboard struct {
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// readDashboard reads deploy/monitoring's dashboard.
func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir, "usher-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash dashboard
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	return dash
}

// TestAlertRulesAndDashboardParse parses every expression of the alert
// rules and of the dashboard's panels as PromQL, and checks that every
// rule has a severity and that the rules cover what an operator is paged
// for.
func TestAlertRulesAndDashboardParse(t *testing.T) {
	t.Parallel()
	rules := readAlertRules(t)
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if _, err := parser.ParseExpr(r.Expr); err != nil {
				t.Errorf("%s: %q does not parse: %v", r.Alert, r.Expr, err)
			}
			if r.Labels["severity"] == "" {
				t.Errorf("%s has no severity", r.Alert)
			}
		}
	}
	for _, want := range []string{"UsherQueueBacklogOld", "UsherUpstreamDown", "UsherAuditSinkLagging", "UsherReplicasBelowTwo", "UsherOutcomeUnknown"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s among %v", want, alerts)
		}
	}

	dash := readDashboard(t)
	exprs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs++
			if _, err := parser.ParseExpr(tg.Expr); err != nil {
				t.Errorf("panel %q: %q does not parse: %v", p.Title, tg.Expr, err)
			}
		}
	}
	if dash.UID == "" || exprs < 10 {
		t.Errorf("the dashboard has uid %q and %d queries", dash.UID, exprs)
	}
}

// TestChartShipsMonitoring renders the production values with /metrics on
// a port of its own and the dashboard on: the replicas listen for metrics
// there (server.metrics_addr), the Service and the ServiceMonitor name that
// port, the PrometheusRule holds the chart's rules and deploy/monitoring's,
// every expression of which parses, and a ConfigMap holds the dashboard.
func TestChartShipsMonitoring(t *testing.T) {
	t.Parallel()
	r := render(t, "-f", productionValues, "--set", "metrics.port=9090", "--set", "metrics.dashboard.enabled=true")
	pod := r.deployment(t).Spec.Template.Spec
	if _, cfg := r.configFile(t, pod); parseConfig(t, cfg).Server.MetricsAddr != "0.0.0.0:9090" {
		t.Errorf("usher.yaml has no server.metrics_addr 0.0.0.0:9090:\n%s", cfg)
	}
	if !slices.ContainsFunc(pod.Containers[0].Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" && p.ContainerPort == 9090 }) {
		t.Errorf("container ports %+v: want metrics 9090", pod.Containers[0].Ports)
	}
	if ports := r.services[0].Spec.Ports; !slices.ContainsFunc(ports, func(p corev1.ServicePort) bool {
		return p.Name == "metrics" && p.Port == 9090 && p.TargetPort.String() == "metrics"
	}) {
		t.Errorf("service ports %+v: want metrics 9090", ports)
	}
	var monitor, rule *unstructured.Unstructured
	for _, o := range r.monitoring {
		switch o.GetKind() {
		case "ServiceMonitor":
			monitor = o
		case "PrometheusRule":
			rule = o
		}
	}
	if monitor == nil || rule == nil {
		t.Fatalf("monitoring objects %v: want a ServiceMonitor and a PrometheusRule", r.kinds)
	}
	endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "endpoints")
	if len(endpoints) != 1 || endpoints[0].(map[string]any)["port"] != "metrics" {
		t.Errorf("ServiceMonitor endpoints %v: want the port metrics", endpoints)
	}
	spec, _, _ := unstructured.NestedMap(rule.Object, "spec")
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := json.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	var groups, alerts []string
	for _, g := range rules.Groups {
		groups = append(groups, g.Name)
		for _, rl := range g.Rules {
			alerts = append(alerts, rl.Alert)
			if _, err := parser.ParseExpr(rl.Expr); err != nil {
				t.Errorf("%s: %q does not parse: %v", rl.Alert, rl.Expr, err)
			}
		}
	}
	if !slices.Contains(groups, "usher") || !slices.Contains(groups, "usher-operations") || !slices.Contains(alerts, "UsherUpstreamDown") {
		t.Errorf("PrometheusRule groups %v, alerts %v: want the chart's and deploy/monitoring's", groups, alerts)
	}
	cm := r.configMaps["usher-dashboard"]
	if cm == nil {
		t.Fatalf("no dashboard ConfigMap (%v)", r.kinds)
	}
	want, err := os.ReadFile(filepath.Join(monitoringDir, "usher-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Byte for byte, but for the final newline, which the block drops.
	if got := cm.Data["usher-dashboard.json"]; strings.TrimSuffix(got, "\n") != strings.TrimSuffix(string(want), "\n") || cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap (labels %v) does not hold deploy/monitoring/usher-dashboard.json", cm.Labels)
	}
}

// TestChartMonitoringOff renders the default values: /metrics stays on
// the http port and no monitoring object or dashboard is rendered.
func TestChartMonitoringOff(t *testing.T) {
	t.Parallel()
	r := render(t)
	pod := r.deployment(t).Spec.Template.Spec
	if _, cfg := r.configFile(t, pod); parseConfig(t, cfg).Server.MetricsAddr != "" {
		t.Errorf("usher.yaml sets server.metrics_addr by default:\n%s", cfg)
	}
	if len(pod.Containers[0].Ports) != 1 || len(r.services[0].Spec.Ports) != 1 {
		t.Errorf("ports %+v, %+v: want http only", pod.Containers[0].Ports, r.services[0].Spec.Ports)
	}
	if len(r.monitoring) != 0 || r.configMaps["usher-dashboard"] != nil {
		t.Errorf("monitoring rendered by default: %v", r.kinds)
	}
}

// TestMonitoringJudgesEachRelease: the chart's ServiceMonitor labels every
// series of a release with its namespace and job (its Service's name), so
// every aggregation of deploy/monitoring's rules keeps them apart (by
// namespace and job), and every series the dashboard reads is of the
// release its variables select.
func TestMonitoringJudgesEachRelease(t *testing.T) {
	t.Parallel()
	for _, g := range readAlertRules(t).Groups {
		for _, r := range g.Rules {
			expr, err := parser.ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("%s: %v", r.Alert, err)
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if a, ok := n.(*parser.AggregateExpr); ok && (a.Without || !slices.Contains(a.Grouping, "namespace") || !slices.Contains(a.Grouping, "job")) {
					t.Errorf("%s: %s does not keep namespace and job apart", r.Alert, a)
				}
				return nil
			})
		}
	}

	dash := readDashboard(t)
	var variables []string
	for _, v := range dash.Templating.List {
		variables = append(variables, v.Name)
	}
	if !slices.Contains(variables, "namespace") || !slices.Contains(variables, "job") {
		t.Errorf("the dashboard's variables %v: want namespace and job", variables)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			expr, err := parser.ParseExpr(tg.Expr)
			if err != nil {
				t.Fatalf("panel %q: %v", p.Title, err)
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				vs, ok := n.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				want := map[string]string{"namespace": "$namespace", "job": "$job"}
				for _, m := range vs.LabelMatchers {
					if v, ok := want[m.Name]; ok && m.Value == v {
						delete(want, m.Name)
					}
				}
				if len(want) > 0 {
					t.Errorf("panel %q: %s is not of the selected release", p.Title, vs)
				}
				return nil
			})
		}
	}
}
