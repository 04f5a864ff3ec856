package store

import (
	"context"
	"errors"
	"time"
)

// The signing keys of Usher's token issuers, each purpose's generations
// side by side while they rotate.

var (
	// insertSigningKey fails on a duplicate (purpose, generation) as on a
	// duplicate id: of two replicas racing to rotate, one inserts.
	insertSigningKey = sql1(`
INSERT INTO signing_keys (` + signingKeyColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`)

	listSigningKeys = sql1(`
SELECT ` + signingKeyColumns + ` FROM signing_keys
WHERE purpose = $1 AND published_until > $2
ORDER BY generation`)

	// resealSigningKey replaces a key's sealed private half, only while
	// it is still the one the caller read.
	resealSigningKey = sql1(`
UPDATE signing_keys SET private_key = $3 WHERE id = $1 AND private_key = $2`)
)

func (c *core) InsertSigningKey(ctx context.Context, k SigningKey) error {
	if err := checkSigningKey(k); err != nil {
		return err
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = c.now()
	}
	return c.fail(c.writeOne(ctx, func(x executor) error {
		_, err := x.exec(ctx, insertSigningKey,
			k.ID, k.Purpose, k.Generation, k.Algorithm, k.PublicKey, k.PrivateKey,
			storedTime(k.CreatedAt), storedTime(k.SignsFrom), storedTime(k.PublishedUntil))
		return err
	}))
}

func (c *core) SigningKeys(ctx context.Context, purpose string, now time.Time) ([]SigningKey, error) {
	keys, err := queryAll(ctx, c.reader(), listSigningKeys, scanSigningKey, purpose, storedTime(now))
	if err != nil {
		return nil, c.fail(err)
	}
	return keys, nil
}

func (c *core) ResealSigningKey(ctx context.Context, id string, old, sealed []byte) (bool, error) {
	if err := invalid(requiredTexts("signing key", []namedText{{"ID", id, true}})...); err != nil {
		return false, err
	}
	if len(old) == 0 || len(sealed) == 0 {
		return false, invalid(errors.New("a signing key's reseal needs its old and its new private half"))
	}
	var n int64
	err := c.writeOne(ctx, func(x executor) (err error) {
		n, err = x.exec(ctx, resealSigningKey, id, old, sealed)
		return err
	})
	if err != nil {
		return false, c.fail(err)
	}
	return n == 1, nil
}

// scanSigningKey reads one row of signingKeyColumns.
func scanSigningKey(row rowScanner) (SigningKey, error) {
	var k SigningKey
	err := row.Scan(&k.ID, &k.Purpose, &k.Generation, &k.Algorithm, &k.PublicKey, &k.PrivateKey,
		at(&k.CreatedAt), at(&k.SignsFrom), at(&k.PublishedUntil))
	return k, err
}
