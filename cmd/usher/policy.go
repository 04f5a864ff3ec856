package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/usherhq/usher/mcpserver"
	"github.com/usherhq/usher/policy"
)

// policyCmd runs `usher policy check|explain|test`. They read files only,
// except explain, which reads the catalog to learn the definition hash of
// a tool (and whether the lock reviews it), resource, template or prompt.
func (e *environment) policyCmd(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, "usage: usher policy check|explain|test [flags]\n")
		return errUsage
	}
	var f installFlags
	fs := e.flagSet("policy " + args[0])
	f.register(fs)
	file := fs.String("policy", "", "Cedar policy `file` (default: policy.file, else the shipped default)")
	lockFile := fs.String("lock", "", "tool lock `file` (default: policy.lock_file)")
	switch args[0] {
	case "check":
		if err := parse(fs, args[1:]); err != nil {
			return err
		}
		return e.policyCheck(&f, *file, *lockFile)
	case "explain":
		return e.policyExplain(ctx, fs, &f, file, lockFile, args[1:])
	case "test":
		files, err := parseInterspersed(fs, args[1:])
		if err != nil {
			return err
		}
		if len(files) != 1 {
			fmt.Fprintln(e.stderr, "usage: usher policy test [--policy FILE] CASES.yaml")
			return errUsage
		}
		return e.policyTest(&f, *file, *lockFile, files[0])
	}
	fmt.Fprintf(e.stderr, "usher policy: unknown command %q (want check, explain or test)\n", args[0])
	return errUsage
}

// policyCheck lints the policy against the lock and prints the findings.
func (e *environment) policyCheck(f *installFlags, file, lockFile string) error {
	p, lock, err := e.policyAndLock(f, file, lockFile)
	if err != nil {
		return err
	}
	if lock == nil {
		cfg, _, err := e.loadConfig(f)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "no tool lock at %s (policy.lock_file): every tool is unreviewed, and allows are not checked against a lock\n", cfg.Policy.LockFile)
	}
	findings := p.Lint(lock)
	for _, fd := range findings {
		fmt.Fprintln(e.stdout, fd)
	}
	if len(findings) > 0 {
		fmt.Fprintf(e.stdout, "%s: valid with findings, %d finding(s), hash %s\n", p.Name(), len(findings), p.Hash())
		return errFailed
	}
	fmt.Fprintf(e.stdout, "%s: valid, 0 finding(s), hash %s\n", p.Name(), p.Hash())
	return nil
}

// policyTest runs the cases of casesFile against the policy and prints
// each result.
func (e *environment) policyTest(f *installFlags, file, lockFile, casesFile string) error {
	p, _, err := e.policyAndLock(f, file, lockFile)
	if err != nil {
		return err
	}
	cases, err := policy.LoadCases(casesFile)
	if err != nil {
		return err
	}
	failed := 0
	for _, r := range policy.RunCases(p, cases) {
		fmt.Fprintln(e.stdout, r)
		if !r.Passed() {
			failed++
		}
	}
	fmt.Fprintf(e.stdout, "%d passed, %d failed\n", len(cases)-failed, failed)
	if failed > 0 {
		return errFailed
	}
	return nil
}

// explainFlags are the flags of `usher policy explain`: the request to
// explain (mcpserver.ExplainInput), and how to print it.
type explainFlags struct {
	user, action, tool, resource, prompt, template, argument, server, args, groups, hash *string
	json                                                                                 *bool
}

func (x *explainFlags) register(fs *flag.FlagSet) {
	x.user = fs.String("user", "", "principal `id` (issuer|tenant|object id) or a user name (required)")
	x.action = fs.String("action", string(policy.ActionCallTool), "the `action`: call_tool, read_resource, get_prompt or complete")
	x.tool = fs.String("tool", "", "tool `name` as listed (for call_tool)")
	x.resource = fs.String("resource", "", "resource `URI` as exposed (for read_resource)")
	x.prompt = fs.String("prompt", "", "prompt `name` as listed (for get_prompt, or complete of a prompt's argument)")
	x.template = fs.String("template", "", "resource `template` as listed (for complete of a template's variable; with read_resource and --definition-hash, the template the URI matched)")
	x.argument = fs.String("argument", "", "the argument being completed, `name=value` (for complete)")
	x.server = fs.String("server", "", "the `server`: builtin or an upstream's name (default: from the catalog)")
	x.args = fs.String("args", "{}", "the call's or prompt's arguments, a JSON `object`")
	x.groups = fs.String("groups", "", "comma-separated `groups` of the user")
	x.hash = fs.String("definition-hash", "", "the definition `hash` (default: from the catalog)")
	x.json = fs.Bool("json", false, "print the explanation as JSON, as GET /api/policy/explain answers it")
}

// missingTarget says which flag the action needs when no flag names what
// it acts on; "" when one does, or for an unknown action (ExplainCall
// says what is wrong then).
func (x *explainFlags) missingTarget() string {
	if *x.tool != "" || *x.resource != "" || *x.prompt != "" || *x.template != "" {
		return ""
	}
	switch policy.Action(*x.action) {
	case policy.ActionCallTool:
		return "--tool is required: the tool's name as tools/list shows it"
	case policy.ActionReadResource:
		return "--resource is required with --action read_resource: the resource's URI as exposed"
	case policy.ActionGetPrompt:
		return "--prompt is required with --action get_prompt: the prompt's name as listed"
	case policy.ActionComplete:
		return "--prompt or --template is required with --action complete"
	}
	return ""
}

// input is the request the flags name.
func (x *explainFlags) input() mcpserver.ExplainInput {
	in := mcpserver.ExplainInput{
		User: *x.user, Action: *x.action, Tool: *x.tool, Resource: *x.resource, Prompt: *x.prompt, Template: *x.template,
		Argument: *x.argument, Server: *x.server, Args: *x.args, DefinitionHash: *x.hash,
	}
	if *x.groups != "" {
		in.Groups = strings.Split(*x.groups, ",")
	}
	return in
}

// policyExplain runs `usher policy explain`: it decides one request as the
// MCP server would, with what the catalog says of its target unless the
// flags say it, and prints the explanation. A request is a tool call
// (--tool), a resource read (--action read_resource --resource URI), a
// prompt get (--action get_prompt --prompt NAME) or a completion
// (--action complete, with --prompt NAME or --template URI-TEMPLATE, and
// --argument NAME=VALUE).
func (e *environment) policyExplain(ctx context.Context, fs *flag.FlagSet, f *installFlags, file, lockFile *string, args []string) error {
	var x explainFlags
	x.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if msg := x.missingTarget(); msg != "" {
		fmt.Fprintln(e.stderr, "usher policy explain: "+msg)
		return errUsage
	}
	p, lock, err := e.policyAndLock(f, *file, *lockFile)
	if err != nil {
		return err
	}
	call, err := mcpserver.ExplainCall(ctx, x.input(), func(ctx context.Context, a mcpserver.Action, ref, name string) (mcpserver.Feature, error) {
		return e.catalogFeature(ctx, f, a, ref, name)
	})
	var bad *mcpserver.InputError
	if errors.As(err, &bad) && !errors.Is(err, mcpserver.ErrNoFeature) {
		fmt.Fprintln(e.stderr, "usher policy explain: "+bad.Problem)
		return errUsage
	}
	if err != nil {
		return err
	}
	if *x.json {
		return json.NewEncoder(e.stdout).Encode(mcpserver.Explain(p, lock, call))
	}
	req := mcpserver.PolicyRequest(call, lock)
	fmt.Fprint(e.stdout, policy.Explain(req, p.Decide(req)))
	return nil
}

// catalogFeature resolves a tool, resource, template or prompt in the
// catalog, which is the configuration's and the binary's (the
// installation set up as for definitions).
func (e *environment) catalogFeature(ctx context.Context, f *installFlags, a mcpserver.Action, ref, name string) (mcpserver.Feature, error) {
	cfg, log, err := e.loadConfig(f)
	if err != nil {
		return mcpserver.Feature{}, err
	}
	in, err := setUp(ctx, cfg, log, nil)
	if err != nil {
		return mcpserver.Feature{}, err
	}
	defer in.Close()
	cat, err := in.catalog(nil, nil)
	if err != nil {
		return mcpserver.Feature{}, err
	}
	defer cat.Close()
	feat, err := cat.Resolve(ctx, a, ref, name)
	if err != nil && !errors.Is(err, mcpserver.ErrNoFeature) {
		log.Warn("usher policy explain: some upstreams could not be listed", "err", err)
		err = nil
	}
	return feat, err
}

// parseInterspersed parses flags that may come before or after the
// positional arguments, and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// policyAndLock loads the policy and lock named by flags or configuration.
// The configured lock may be absent (it reviews nothing); a lock file named
// by --lock must exist.
func (e *environment) policyAndLock(f *installFlags, file, lockFile string) (*policy.Policy, *policy.Lock, error) {
	cfg, _, err := e.loadConfig(f)
	if err != nil {
		return nil, nil, err
	}
	if file != "" {
		cfg.Policy.File = file
	}
	in := &installation{cfg: cfg}
	p, err := in.loadPolicy()
	if err != nil {
		return nil, nil, err
	}
	if lockFile != "" {
		// A lock named on the command line must be there: a typo must not
		// pass for "no lock".
		lock, err := policy.ReadLock(lockFile)
		return p, lock, err
	}
	lock, err := in.loadLock()
	return p, lock, err
}
