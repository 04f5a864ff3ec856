package helm

import (
	"encoding/json"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/usherhq/usher/internal/testenv"
)

// TestChartDevelopmentSignIn runs the chart's trial mode as
// docs/deploy.md describes it: usher.developmentSignIn, the public URL
// http://127.0.0.1:PORT that `kubectl port-forward` serves, the secrets
// from secrets.values. The replica listens on every address of its port,
// as server.addr 0.0.0.0:8080 does in its pod (not on the free loopback
// address the other chart tests give it), and the development provider,
// which calls that very process for its keys, starts; a token it issues
// is taken by the API, through the forwarded URL.
func TestChartDevelopmentSignIn(t *testing.T) {
	t.Parallel()
	bin := testenv.Usher(t)
	dbURL := ownDatabase(t, testenv.DatabaseURL(t))
	_, port, err := net.SplitHostPort(testenv.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	publicURL := "http://127.0.0.1:" + port
	r := render(t, "--set", "usher.identity.issuer=", "--set", "usher.developmentSignIn=true", "--set", "usher.publicURL="+publicURL,
		"--set", "usher.model.provider=demo", "--set", "secrets.values.keyEncryptionKey="+freshKEK(), "--set", "secrets.values.databaseURL="+dbURL)
	if out, err := newPod(t, bin, r, r.migration(t).Spec.Template.Spec, nil).run(); err != nil {
		t.Fatalf("the migration Job's command: %v\n%s", err, out)
	}
	p := newPod(t, bin, r, r.deployment(t).Spec.Template.Spec, nil)
	p.addr, p.url = "0.0.0.0:"+port, publicURL
	p.env = append(p.env, "USHER_SERVER_ADDR="+p.addr) // the last of a name wins
	p.start(t)

	c := &client{t: t, base: publicURL}
	code, body := c.do("GET", publicURL+"/dev/oidc/.well-known/openid-configuration", "")
	var discovery struct {
		Issuer string `json:"issuer"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &discovery) != nil || discovery.Issuer != publicURL+"/dev/oidc" {
		t.Fatalf("the development provider's discovery: %d %s; want the issuer %s/dev/oidc", code, body, publicURL)
	}
	// A token of the provider, as `usher token user` prints it, with the
	// pod's configuration and environment.
	cmd := exec.Command(bin, append([]string{"token", "user", "--sub", "alice"}, p.args[1:]...)...)
	cmd.Env = p.env
	token, err := cmd.Output()
	if err != nil {
		t.Fatalf("usher token user: %v", err)
	}
	c.token = strings.TrimSpace(string(token))
	if code, body := c.do("GET", publicURL+"/api/me", ""); code != http.StatusOK || !strings.Contains(string(body), "alice") {
		t.Errorf("GET /api/me with the development provider's token: %d %s", code, body)
	}
}
