package main

import (
	"context"
	"fmt"

	"github.com/usherhq/usher/broker"
)

// keysCmd runs `usher keys reseal`: after broker.key_encryption_key
// replaced the keys now in broker.previous_key_encryption_keys, it seals
// every stored signing key — the broker's, the development provider's
// and the audit keys — with the new key, so that the previous ones can
// be dropped. Keys already sealed with the new key are left as they are:
// it may be run again, and run while replicas serve.
func (e *environment) keysCmd(ctx context.Context, args []string) error {
	const use = "usage: usher keys reseal [flags]\n"
	if len(args) == 0 || args[0] != "reseal" {
		fmt.Fprint(e.stderr, use)
		return errUsage
	}
	var f installFlags
	fs := e.flagSet("keys reseal")
	f.register(fs)
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	in, err := e.openInstallation(ctx, &f)
	if err != nil {
		return err
	}
	defer in.Close()
	total := 0
	for _, purpose := range []string{purposeBroker, purposeDevOIDC} {
		kr, err := in.keyring(purpose, broker.MaxTokenLifetime)
		if err != nil {
			return err
		}
		n, err := kr.Reseal(ctx, in.store)
		if err != nil {
			return in.sealHint(err)
		}
		fmt.Fprintf(e.stdout, "%s signing keys: %d resealed\n", purpose, n)
		total += n
	}
	keys, _, err := in.auditKeys(in.cliURL())
	if err != nil {
		return err
	}
	n, err := keys.Reseal(ctx, in.store)
	if err != nil {
		return fmt.Errorf("%w (is broker.key_encryption_key or one of broker.previous_key_encryption_keys the key the audit keys were sealed with?)", err)
	}
	fmt.Fprintf(e.stdout, "audit signing keys: %d resealed\n", n)
	total += n
	fmt.Fprintf(e.stdout, "every published signing key is sealed with broker.key_encryption_key (%d resealed now)\n", total)
	return nil
}
